package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stripe/stripe-go/v83/webhook"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

const secret = "whsec_subprocess_secret"

// gatewayBinary is the gateway, built once per test binary.
func gatewayBinary(t *testing.T) string {
	t.Helper()
	return gatewaytest.Binary(t)
}

func freePort(t *testing.T) int {
	t.Helper()
	return gatewaytest.FreePort(t)
}

func writeConfig(t *testing.T, dir, body string) string {
	t.Helper()
	return gatewaytest.WriteConfig(t, dir, body)
}

// gateway is one run of the binary; its output is kept in memory (Log).
type gateway = gatewaytest.Gateway

// startGateway runs the binary on configPath and waits until it answers HTTP.
func startGateway(t *testing.T, configPath, addr string) *gateway {
	t.Helper()
	return gatewaytest.StartGateway(t, configPath, addr, gatewaytest.GatewayOptions{})
}

// post sends a Stripe-signed event and returns the status and the answer's
// "status" field.
func post(client *http.Client, addr, id string) (int, string, error) {
	body := []byte(fmt.Sprintf(`{"id":%q,"type":"invoice.paid","data":{}}`, id))
	p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret})
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/webhooks/stripe", bytes.NewReader(body))
	req.Header.Set("Stripe-Signature", p.Header)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	switch {
	case bytes.Contains(b, []byte(`"status":"accepted"`)):
		return resp.StatusCode, "accepted", nil
	case bytes.Contains(b, []byte(`"status":"duplicate"`)):
		return resp.StatusCode, "duplicate", nil
	}
	return resp.StatusCode, string(b), nil
}

func runNATS(t *testing.T, port int, dir string) *server.Server {
	t.Helper()
	return gatewaytest.RunNATS(t, port, dir)
}

// streamIDs returns how often each event ID is in the stream.
func streamIDs(t *testing.T, url string) map[string]int {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := natsjs.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, "HOOKGATE_EVENTS")
	if err != nil {
		return nil
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		ids[m.Header.Get("Hookgate-Event-Id")]++
	}
	return ids
}

func waitStream(t *testing.T, url string, want map[string]bool) map[string]int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ids := streamIDs(t, url)
		missing := 0
		for id := range want {
			if ids[id] == 0 {
				missing++
			}
		}
		if missing == 0 {
			return ids
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d accepted events never reached the stream", missing, len(want))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Killed between commit and publish (NATS down, so nothing could be
// published), the gateway publishes every accepted event exactly once after
// a restart, and a resend is answered duplicate.
func TestKillBetweenCommitAndPublish(t *testing.T) {
	dir := t.TempDir()
	natsDir := filepath.Join(dir, "nats")
	natsPort := freePort(t)
	srv := runNATS(t, natsPort, natsDir)
	natsURL := srv.ClientURL()
	srv.Shutdown()
	srv.WaitForShutdown()

	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := writeConfig(t, dir, fmt.Sprintf(`
listen: %q
data_dir: %q
nats: {url: %q, connect_timeout: 1s, retention: limits}
sources: [{name: stripe, verify: stripe, secrets: [%q]}]
`, addr, filepath.Join(dir, "data"), natsURL, secret))
	g := startGateway(t, cfg, addr)
	accepted := map[string]bool{}
	for i := 0; i < 25; i++ {
		id := fmt.Sprintf("evt_%d", i)
		status, what, err := post(http.DefaultClient, addr, id)
		if err != nil || status != 200 || what != "accepted" {
			t.Fatalf("post %s: %d %s %v\n%s", id, status, what, err, g.Log())
		}
		accepted[id] = true
	}
	g.Kill()

	runNATS(t, natsPort, natsDir)
	g = startGateway(t, cfg, addr)
	ids := waitStream(t, natsURL, accepted)
	for id, n := range ids {
		if n != 1 || !accepted[id] {
			t.Errorf("event %s is in the stream %d times (accepted: %v)", id, n, accepted[id])
		}
	}
	if status, what, _ := post(http.DefaultClient, addr, "evt_3"); status != 200 || what != "duplicate" {
		t.Fatalf("resend after restart: %d %s, want 200 duplicate", status, what)
	}
	g.Kill()
}

// SIGKILL at random moments under concurrent load, with the embedded
// server: every acknowledged event reaches the stream, none twice.
func TestKillUnderLoad(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	dir := t.TempDir()
	natsPort := freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := writeConfig(t, dir, fmt.Sprintf(`
listen: %q
data_dir: %q
nats: {port: %d, retention: limits}
sources: [{name: stripe, verify: stripe, secrets: [%q]}]
`, addr, filepath.Join(dir, "data"), natsPort, secret))

	var mu sync.Mutex
	acked := map[string]bool{}
	var next atomic.Int64
	for cycle := 0; cycle < 3; cycle++ {
		g := startGateway(t, cfg, addr)
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 10 * time.Second}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					// Every fifth request repeats an earlier event, as providers do.
					n := next.Add(1)
					if n%5 == 0 {
						n = n / 2
					}
					id := fmt.Sprintf("evt_%d", n)
					status, _, err := post(client, addr, id)
					if err != nil {
						return // the gateway is gone
					}
					if status == 200 {
						mu.Lock()
						acked[id] = true
						mu.Unlock()
					}
				}
			}()
		}
		time.Sleep(time.Duration(100+rng.IntN(400)) * time.Millisecond) // load runs for a random while
		g.Kill()
		close(stop)
		wg.Wait()
		client.CloseIdleConnections()
	}
	g := startGateway(t, cfg, addr)
	ids := waitStream(t, fmt.Sprintf("nats://127.0.0.1:%d", natsPort), acked)
	for id, n := range ids {
		if n != 1 {
			t.Errorf("event %s is in the stream %d times", id, n)
		}
	}
	t.Logf("%d events acknowledged over 3 kills; %d in the stream", len(acked), len(ids))
	g.Kill()
}

func TestBadConfigRefused(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"unknown key", "listen: x:1\nsources: [{name: a, verify: none, id_field: id}]\nbogus: 1\n", "bogus: unknown key"},
		{"unknown scheme", "sources: [{name: a, verify: rot13, secrets: [s]}]\n", `sources[0].verify: unknown scheme "rot13"`},
		{"no secret", "sources: [{name: a, verify: stripe}]\n", "sources[0].secrets"},
		{"duplicate source", "sources: [{name: a, verify: none, id_field: id}, {name: a, verify: none, id_field: id}]\n", `sources[1].name: duplicate source "a"`},
		{"unset variable", "sources: [{name: a, verify: stripe, secrets: [\"${HOOKGATE_TEST_UNSET_VAR}\"]}]\n", "HOOKGATE_TEST_UNSET_VAR is not set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := writeConfig(t, t.TempDir(), tt.yaml)
			out, err := exec.Command(gatewayBinary(t), "-config", cfg).CombinedOutput()
			if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Fatalf("exit: %v, want exit status 2\n%s", err, out)
			}
			if !strings.Contains(string(out), tt.want) {
				t.Fatalf("output %q does not name %q", out, tt.want)
			}
		})
	}
}
