package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stripe/stripe-go/v83/webhook"

	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/jetstream"
)

const payloadToken = "payload-test-token-0123456789"

// A max_body the broker could not carry stops the start with a config
// error naming both numbers; one left at its default is lowered instead.
func TestMaxBodyOverBrokerPayload(t *testing.T) {
	start := func(cfg *config.Config) (*App, error) {
		a := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		err := a.Start(context.Background())
		t.Cleanup(func() { a.Stop(context.Background()) })
		return a, err
	}
	for _, tt := range []struct{ name, extra, key, size string }{
		{"source", "    max_body: 9437184\n", "sources[0].max_body", "9437184"},
		{"tasks", "tasks: {max_body: 7340032}\n", "tasks.max_body", "7340032"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t, tt.extra)
			_, err := start(cfg)
			var cfgErr *config.Error
			if !errors.As(err, &cfgErr) || cfgErr.Path != tt.key {
				t.Fatalf("Start = %v, want a config error on %s", err, tt.key)
			}
			if msg := err.Error(); !strings.Contains(msg, tt.size) || !strings.Contains(msg, "8388608") {
				t.Fatalf("error %q does not name both %s and the max payload 8388608", msg, tt.size)
			}
		})
	}
	// Lowered, a default is noted at info: the operator set nothing, and
	// every gateway on an external NATS at its own default (1 MiB) has it
	// lowered at every start.
	t.Run("default lowered", func(t *testing.T) {
		srv := runNATSPayload(t, freePort(t), t.TempDir(), 64<<10)
		cfg := testConfig(t, fmt.Sprintf("nats: {url: %q, connect_timeout: 2s}\n", srv.ClientURL()))
		var logged gatewaytest.SyncBuffer
		a := New(cfg, slog.New(slog.NewTextHandler(&logged, nil)))
		err := a.Start(context.Background())
		t.Cleanup(func() { a.Stop(context.Background()) })
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		var lowered []string
		for line := range strings.Lines(logged.String()) {
			if strings.Contains(line, "max_body left at its default is lowered") {
				lowered = append(lowered, line)
			}
		}
		if len(lowered) != 2 {
			t.Fatalf("logged %d lines of a lowered default, want 2 (sources[0], tasks):\n%s", len(lowered), logged.String())
		}
		for _, line := range lowered {
			if !strings.Contains(line, "level=INFO") {
				t.Errorf("a default lowered to fit is logged above info: %s", line)
			}
		}
		want := 64<<10 - jetstream.HeaderRoom
		if got := a.cfg.Sources[0].MaxBody; got != want {
			t.Fatalf("default max_body with a 64 KiB max payload = %d, want %d", got, want)
		}
		if got := a.cfg.Tasks.MaxBody; got != want*3/4 {
			t.Fatalf("default tasks.max_body with a 64 KiB max payload = %d, want %d", got, want*3/4)
		}
	})
}

// runNATSPayload is gatewaytest.RunNATS with a max payload.
func runNATSPayload(t *testing.T, port int, dir string, maxPayload int32) *server.Server {
	t.Helper()
	return gatewaytest.RunNATSWith(t, server.Options{Port: port, StoreDir: dir, MaxPayload: maxPayload})
}

func postPadded(t *testing.T, a *App, id string, pad int) (int, string) {
	t.Helper()
	body := []byte(fmt.Sprintf(`{"id":%q,"type":"invoice.paid","pad":%q}`, id, strings.Repeat("x", pad)))
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

// An event the broker refuses for its size (an external server whose max
// payload shrank after the start) is parked, counted and listed; the
// events behind it are delivered; an operator puts it back once the
// server takes it again.
func TestOversizedEventParked(t *testing.T) {
	ds, delivered := countingDownstream(t)
	port, dir := freePort(t), t.TempDir()
	srv := runNATSPayload(t, port, dir, 1<<20)
	cfg := testConfig(t, fmt.Sprintf(`    max_body: 524288
nats: {url: "nats://127.0.0.1:%d", connect_timeout: 2s}
api: {tokens: [%q]}
routes:
  - {name: billing, sources: [stripe], url: %q}
`, port, payloadToken, ds.URL))
	a := startApp(t, cfg)
	if code, body := postPadded(t, a, "evt_first", 10); code != 200 {
		t.Fatalf("post: %d %s", code, body)
	}
	waitFor(t, "the first event delivered", func() (bool, string) { n := delivered(); return n == 1, fmt.Sprint(n) })

	// The server comes back with a max payload of 64 KiB.
	srv.Shutdown()
	srv.WaitForShutdown()
	srv = runNATSPayload(t, port, dir, 64<<10)
	waitFor(t, "delivering again", func() (bool, string) {
		code, r := delivery(t, a)
		return code == 200, fmt.Sprintf("%d %+v", code, r)
	})
	if code, body := postPadded(t, a, "evt_big", 200<<10); code != 200 {
		t.Fatalf("post the big event: %d %s", code, body)
	}
	for i := range 5 {
		if code, body := postPadded(t, a, fmt.Sprintf("evt_after_%d", i), 10); code != 200 {
			t.Fatalf("post: %d %s", code, body)
		}
	}
	waitFor(t, "the events behind the big one delivered", func() (bool, string) {
		n := delivered()
		return n == 6, fmt.Sprint(n)
	})

	type parked struct {
		Data []struct {
			Seq    int64  `json:"seq"`
			ID     string `json:"event_id"`
			Size   int    `json:"size"`
			Reason string `json:"reason"`
		} `json:"data"`
	}
	var p parked
	code, body := get(t, "http://"+a.Addr()+"/v1/outbox/parked", payloadToken)
	if err := json.Unmarshal([]byte(body), &p); code != 200 || err != nil {
		t.Fatalf("GET /v1/outbox/parked = %d %s (%v)", code, body, err)
	}
	if len(p.Data) != 1 || p.Data[0].ID != "evt_big" || !strings.Contains(p.Data[0].Reason, "maximum payload") {
		t.Fatalf("parked = %s, want evt_big refused for its payload", body)
	}
	if code, _ := get(t, "http://"+a.Addr()+"/v1/outbox/parked", ""); code != 401 {
		t.Fatalf("GET /v1/outbox/parked without a token = %d, want 401", code)
	}
	if got := value(scrape(t, a, ""), "hookgate_outbox_parked_total"); got != 1 {
		t.Fatalf("hookgate_outbox_parked_total = %v, want 1", got)
	}
	if code, r := delivery(t, a); code != 200 {
		t.Fatalf("/readyz/delivery with a parked event = %d %+v, want 200 (it no longer holds anything up)", code, r)
	}

	// The server takes 1 MiB again; the operator puts the event back.
	srv.Shutdown()
	srv.WaitForShutdown()
	runNATSPayload(t, port, dir, 1<<20)
	waitFor(t, "delivering again", func() (bool, string) {
		code, r := delivery(t, a)
		return code == 200, fmt.Sprintf("%d %+v", code, r)
	})
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://%s/v1/outbox/parked/%d/requeue", a.Addr(), p.Data[0].Seq), nil)
	req.Header.Set("Authorization", "Bearer "+payloadToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 202 {
		t.Fatalf("requeue = %d, want 202", resp.StatusCode)
	}
	waitFor(t, "the big event delivered", func() (bool, string) { n := delivered(); return n == 7, fmt.Sprint(n) })
	if code, body := get(t, "http://"+a.Addr()+"/v1/outbox/parked", payloadToken); code != 200 || !strings.Contains(body, `"data":[]`) {
		t.Fatalf("parked after the requeue = %d %s, want none", code, body)
	}
}
