package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v83/webhook"

	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/store"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

const secret = "whsec_app_test_secret"

func testConfig(t *testing.T, extra string) *config.Config {
	t.Helper()
	dir := t.TempDir()
	yaml := fmt.Sprintf(`
listen: "127.0.0.1:0"
data_dir: %q
sources:
  - name: stripe
    verify: stripe
    secrets: [%q]
%s`, dir, secret, extra)
	cfg, err := config.Parse([]byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func startApp(t *testing.T, cfg *config.Config) *App {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	a := New(cfg, log)
	if err := a.Start(context.Background()); err != nil {
		a.Stop(context.Background())
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { a.Stop(context.Background()) })
	return a
}

func postStripe(t *testing.T, a *App, id string) (int, string) {
	t.Helper()
	body := []byte(fmt.Sprintf(`{"id":%q,"type":"invoice.paid"}`, id))
	p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret})
	req, _ := http.NewRequest(http.MethodPost, "http://"+a.Addr()+"/webhooks/stripe", bytes.NewReader(body))
	req.Header.Set("Stripe-Signature", p.Header)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	gatewaytest.WaitFor(t, what, 20*time.Second, cond)
}

func streamMsgs(a *App) uint64 {
	s, err := a.Broker().JetStream().Stream(context.Background(), a.Broker().Stream())
	if err != nil {
		return 0
	}
	info, err := s.Info(context.Background())
	if err != nil {
		return 0
	}
	return info.State.Msgs
}

// Accepted events reach the stream once; duplicates and restarts add nothing.
func TestEndToEnd(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.NATS.Retention = "limits" // keep the messages: the test counts them
	a := startApp(t, cfg)
	for i := 0; i < 20; i++ {
		for range 2 {
			status, body := postStripe(t, a, fmt.Sprintf("evt_%d", i))
			if status != 200 {
				t.Fatalf("status %d %s", status, body)
			}
		}
	}
	status, body := postStripe(t, a, "evt_3")
	if status != 200 || !strings.Contains(body, `"duplicate"`) {
		t.Fatalf("repeat answered %d %s, want 200 duplicate", status, body)
	}
	waitFor(t, "20 messages", func() (bool, string) {
		n := streamMsgs(a)
		return n == 20, fmt.Sprint(n)
	})
	status, body = postStripe(t, a, "")
	if status != 400 {
		t.Fatalf("event without id answered %d %s, want 400", status, body)
	}
	resp, err := http.Get("http://" + a.Addr() + "/nowhere")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || !strings.Contains(string(b), `"code":"not_found"`) {
		t.Fatalf("unknown path answered %d %s", resp.StatusCode, b)
	}
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := a.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop: %v", err)
	}

	// Restart on the same data: the stream and the dedup survive.
	a2 := startApp(t, cfg)
	status, body = postStripe(t, a2, "evt_7")
	if status != 200 || !strings.Contains(body, `"duplicate"`) {
		t.Fatalf("after restart: %d %s, want 200 duplicate", status, body)
	}
	if n := streamMsgs(a2); n != 20 {
		t.Fatalf("after restart the stream holds %d, want 20", n)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "hookgate.db")); err != nil {
		t.Fatalf("database not under data_dir: %v", err)
	}
}

func TestStartFailsClearly(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.Listen = "127.0.0.1:99999"
	a := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	err := a.Start(context.Background())
	a.Stop(context.Background())
	if err == nil || !strings.Contains(err.Error(), "listen 127.0.0.1:99999") {
		t.Fatalf("Start = %v, want a listen error", err)
	}
}

// Start records each service it started, in order; Stop stops them in
// reverse, once: after a start that failed at its last step, the store and
// the broker are closed.
func TestStopUnwindsWhatStarted(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.Listen = "127.0.0.1:99999"
	a := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := a.Start(context.Background()); err == nil {
		t.Fatal("Start succeeded on a bad listen address")
	}
	var names []string
	for _, s := range a.running {
		names = append(names, s.name)
	}
	if want := []string{"store", "broker", "console stats' last sample", "relay", "deliveries", "retention"}; !slices.Equal(names, want) {
		t.Fatalf("started %v, want %v (http failed)", names, want)
	}
	if err := a.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := a.Stop(context.Background()); err != nil {
		t.Fatalf("a second Stop: %v", err)
	}
	if _, err := a.Store().Claim(context.Background(), &store.Event{Source: "stripe", ID: "late"}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Claim after Stop = %v, want store.ErrClosed", err)
	}
	if a.Broker().Conn().IsConnected() {
		t.Fatal("the broker is still connected after Stop")
	}
}
