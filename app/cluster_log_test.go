package app

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// startAppLogged is startApp with the gateway's log (INFO and above)
// written to w.
func startAppLogged(t *testing.T, cfgYAML string, w *gatewaytest.SyncBuffer) *App {
	t.Helper()
	a := New(testConfig(t, cfgYAML), slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err := a.Start(context.Background()); err != nil {
		a.Stop(context.Background())
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { a.Stop(context.Background()) })
	return a
}

// logLines counts the lines of log at level with msg in them.
func logLines(log, level, msg string) (n int, first string) {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "level="+level) && strings.Contains(l, msg) {
			if n == 0 {
				first = l
			}
			n++
		}
	}
	return n, first
}

// Two gateways started together on a new 3-node NATS cluster (the
// delivery bucket made by the first delivery), events spread over both:
// delivering an event another gateway accepted is normal in cluster mode
// (no INFO line), and the buckets' leaders being elected at start is
// expected (no WARN line about NATS having no responders).
func TestClusterLogQuiet(t *testing.T) {
	nc := gatewaytest.RunNATSCluster(t, 3)
	keys, downstream := newKeyCounter(t)
	var logs [2]gatewaytest.SyncBuffer
	var gws []*App
	for i := range logs {
		gws = append(gws, startAppLogged(t, fmt.Sprintf(`
nats: {url: %q, replicas: 3, duplicate_window: 1s, connect_timeout: 5s}
cluster: {enabled: true, claim_timeout: 10s}
routes:
  - {name: billing, sources: [stripe], url: %q}
`, nc.URL, downstream.URL), &logs[i]))
	}
	const events = 20
	for e := range events {
		if code, body := postStripe(t, gws[e%2], fmt.Sprintf("evt_quiet_%d", e)); code != 200 {
			t.Fatalf("event %d: %d %s", e, code, body)
		}
	}
	waitDrained(t, gws)
	gatewaytest.WaitFor(t, "every event delivered", 30*time.Second, func() (bool, string) {
		n, _ := keys.counts()
		return n == events, fmt.Sprintf("%d of %d delivered", n, events)
	})
	for i := range logs {
		log := logs[i].String()
		if n, first := logLines(log, "INFO", "Hookgate-Seq is not its event's"); n > 0 {
			t.Errorf("gateway %d: %d INFO lines about an adopted event, want 0; the first:\n%s", i, n, first)
		}
		if n, first := logLines(log, "WARN", "no responders"); n > 0 {
			t.Errorf("gateway %d: %d WARN lines about no responders, want 0; the first:\n%s", i, n, first)
		}
	}
}
