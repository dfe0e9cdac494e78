package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// A second SIGTERM during a graceful shutdown ends the process at once,
// without waiting out shutdown_timeout for deliveries stuck downstream.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	hang := make(chan struct{})
	reached := make(chan struct{}, 1)
	ds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case reached <- struct{}{}:
		default:
		}
		<-hang
	}))
	defer ds.Close()
	defer close(hang) // before ds.Close, which waits for the handler
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := writeConfig(t, dir, fmt.Sprintf(`
listen: %q
data_dir: %q
shutdown_timeout: 60s
sources: [{name: stripe, verify: stripe, secrets: [%q]}]
routes: [{name: stuck, sources: [stripe], url: %q, timeout: 60s}]
`, addr, filepath.Join(dir, "data"), secret, ds.URL))
	g := startGateway(t, cfg, addr)
	if status, _, err := post(http.DefaultClient, addr, "evt_stuck"); err != nil || status != 200 {
		t.Fatalf("post: %d %v", status, err)
	}
	<-reached // a delivery is in flight and will not finish
	g.Signal(syscall.SIGTERM)
	// The first signal starts a graceful shutdown that waits for the
	// delivery; once it has begun, a second signal ends the process.
	waitLog(t, g, "shutting down")
	g.Signal(syscall.SIGTERM)
	select {
	case <-g.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("the process did not exit after a second SIGTERM\n%s", g.Log())
	}
	if g.Err() == nil {
		t.Fatalf("exit after a second signal = %v, want killed by the signal", g.Err())
	}
}

func waitLog(t *testing.T, g *gateway, text string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(g.Log(), text) {
		if time.Now().After(deadline) {
			t.Fatalf("log never said %q:\n%s", text, g.Log())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// SIGTERM while the gateway is still starting (here connecting to a NATS
// server that accepts but never answers, for up to connect_timeout) is a
// requested stop: the gateway stops at once, exit 0, logging it at info.
func TestSIGTERMDuringStartup(t *testing.T) {
	addr, accepted := gatewaytest.SilentServer(t)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf(`
listen: "127.0.0.1:0"
data_dir: %q
nats: {url: "nats://%s", connect_timeout: 5m}
sources: [{name: stripe, verify: stripe, secrets: [%q]}]
`, filepath.Join(dir, "data"), addr, secret))
	p, err := gatewaytest.Start("gateway", []string{gatewayBinary(t), "-config", cfg}, gatewaytest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	// Connecting to the listener: the signal handler is in place, the
	// start-up is not done.
	select {
	case <-accepted:
	case <-p.Done():
		t.Fatalf("gateway exited before connecting to NATS:\n%s", p.Log())
	case <-time.After(30 * time.Second):
		t.Fatalf("gateway never connected to NATS:\n%s", p.Log())
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !p.Wait(30 * time.Second) {
		t.Fatalf("gateway still running 30 s after SIGTERM (connect_timeout 5m):\n%s", p.Log())
	}
	if code := p.ExitCode(); code != 0 {
		t.Fatalf("exit status %d after SIGTERM during start-up, want 0:\n%s", code, p.Log())
	}
	if log := p.Log(); !strings.Contains(log, `level=INFO msg="stopped during start-up"`) || strings.Contains(log, "level=ERROR") {
		t.Fatalf("want an info line on the stop and no error:\n%s", log)
	}
}
