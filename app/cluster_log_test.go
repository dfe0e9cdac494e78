package app

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
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

// Three gateways of a new deployment started at once on a new 3-node NATS
// cluster: each makes or finds the events stream, its consumers, the
// buckets and the records stream while the others' equal creations are
// in flight, and none warns of anything or waits out a timeout: each is
// ready, and takes an event delivered by the routes.
func TestClusterFirstStartTogether(t *testing.T) {
	nc := gatewaytest.RunNATSCluster(t, 3)
	_, downstream := newKeyCounter(t)
	var logs [3]gatewaytest.SyncBuffer
	gws := make([]*App, len(logs))
	errs := make([]error, len(logs))
	var wg sync.WaitGroup
	for i := range logs {
		gws[i] = New(testConfig(t, fmt.Sprintf(`
nats: {url: %q, replicas: 3, connect_timeout: 30s}
cluster: {enabled: true}
routes:
  - {name: billing, sources: [stripe], url: %q}
  - {name: audit, sources: [stripe], url: %q}
`, nc.URL, downstream.URL, downstream.URL)), slog.New(slog.NewTextHandler(&logs[i], &slog.HandlerOptions{Level: slog.LevelDebug})))
		t.Cleanup(func() { gws[i].Stop(context.Background()) })
		wg.Go(func() { errs[i] = gws[i].Start(context.Background()) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("gateway %d: Start: %v", i, err)
		}
	}
	for i, a := range gws {
		gatewaytest.WaitFor(t, fmt.Sprintf("gateway %d: /readyz/delivery ok", i), 60*time.Second, func() (bool, string) {
			code, ans := delivery(t, a)
			return code == 200, fmt.Sprintf("%d %+v", code, ans)
		})
		if code, body := postStripe(t, a, fmt.Sprintf("evt_together_%d", i)); code != 200 {
			t.Fatalf("gateway %d: %d %s", i, code, body)
		}
	}
	waitDrained(t, gws)
	// A request that waited out its timeout may be logged below WARN (the
	// first failure of a run of them): the log is read at DEBUG.
	for i := range logs {
		var bad []string
		for _, l := range strings.Split(logs[i].String(), "\n") {
			if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") || strings.Contains(l, "deadline exceeded") {
				bad = append(bad, l)
			}
		}
		if len(bad) > 0 {
			t.Errorf("gateway %d warned or waited out a timeout:\n%s", i, strings.Join(bad, "\n"))
		}
	}
}
