package outbound_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/app"
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/store"
)

// A route removed and configured again is given what it had not finished
// when it left: its consumer was deleted with it, and with it the
// messages of its open deliveries and of the events it had not pulled.
// The start that configures it again publishes them anew: a retrying
// delivery's next round comes at its next attempt (within the second a
// round is run early), not at once, and an event it had not pulled (it
// was paused) is delivered once it is resumed. An event received while
// it was gone is not given to it.
func TestRouteBackGivenItsUnfinishedWork(t *testing.T) {
	var mu sync.Mutex
	var secondAt time.Time
	ds := newDownstream(t, func(w http.ResponseWriter, r *http.Request, n int) int {
		status := http.StatusOK
		if r.URL.Path == "/b" && r.Header.Get("X-Hookgate-Event-Id") == "evt_open" {
			if r.Header.Get("X-Hookgate-Attempt") == "1" {
				status = http.StatusInternalServerError
			} else {
				mu.Lock()
				secondAt = time.Now()
				mu.Unlock()
			}
		}
		w.WriteHeader(status)
		return status
	})
	dir := t.TempDir()
	cfg := func(routes string) *config.Config {
		return dirConfig(t, dir, fmt.Sprintf("api: {tokens: [%q]}\n", apiToken), routes)
	}
	a := routeYAML("a", ds.URL+"/a", "")
	both := a + routeYAML("b", ds.URL+"/b", ", retries: 0, schedule: [4s]")
	stop := func(g *gateway) {
		t.Helper()
		if err := g.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	post := func(g *gateway, path string) {
		t.Helper()
		if code, body := g.api(t, http.MethodPost, path, apiToken); code != http.StatusOK {
			t.Fatalf("POST %s: %d %s", path, code, body)
		}
	}
	g := restart(t, cfg(both))
	g.send(t, "evt_open", "invoice.paid")
	open := g.waitState(t, "b", "stripe", "evt_open", store.StateRetrying)
	post(g, "/v1/routes/b/pause")
	g.send(t, "evt_unpulled", "invoice.paid")
	g.waitState(t, "a", "stripe", "evt_unpulled", store.StateSucceeded)
	waitPublished(t, g, "evt_unpulled")
	stop(g)

	g = restart(t, cfg(a)) // b removed: its consumer deleted
	g.send(t, "evt_gone", "invoice.paid")
	g.waitState(t, "a", "stripe", "evt_gone", store.StateSucceeded)
	waitPublished(t, g, "evt_gone")
	stop(g)

	g = restart(t, cfg(both))
	post(g, "/v1/routes/b/resume")
	if d := g.waitState(t, "b", "stripe", "evt_open", store.StateSucceeded); d.Attempts != 2 || d.Rounds != 1 {
		t.Errorf("b evt_open: %d attempts, %d rounds; want 2 and 1 (the schedule's next round)", d.Attempts, d.Rounds)
	}
	mu.Lock()
	at := secondAt
	mu.Unlock()
	if early := open.NextAttemptAt.Sub(at); early > time.Second {
		t.Errorf("b's next round of evt_open ran %v before its next attempt (%v)", early, open.NextAttemptAt)
	}
	g.waitState(t, "b", "stripe", "evt_unpulled", store.StateSucceeded)
	g.send(t, "evt_after", "invoice.paid")
	g.waitState(t, "b", "stripe", "evt_after", store.StateSucceeded)
	if d := g.delivery(t, "b", "stripe", "evt_gone"); d != nil {
		t.Errorf("b has a delivery of evt_gone, received while it was gone: %+v", *d)
	}
}

// A removed route's consumer is deleted only once the store recorded that
// the route takes nothing from now on: deleted first, a crash before the
// record (here a store that cannot record it) lost the route's open
// deliveries and the events it had not pulled, and configured again it
// was not given them anew (its history said it never left).
func TestRemovedRouteConsumerKeptUntilRecorded(t *testing.T) {
	ds := newDownstream(t, nil)
	dir := t.TempDir()
	cfg := func(routes string) *config.Config { return dirConfig(t, dir, "", routes) }
	a := routeYAML("a", ds.URL+"/a", "")
	g := restart(t, cfg(a+routeYAML("b", ds.URL+"/b", "")))
	g.send(t, "evt_1", "invoice.paid")
	g.waitState(t, "b", "stripe", "evt_1", store.StateSucceeded)
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	withStore(t, g.cfg.Store.Path, func(st *store.Store) {
		if err := st.SetMeta(ctx, "route_takes:b", "{"); err != nil { // b's removal cannot be recorded
			t.Fatal(err)
		}
	})

	g = &gateway{App: app.New(cfg(a), slog.New(slog.DiscardHandler))}
	t.Cleanup(func() { g.Stop(context.Background()) })
	if err := g.Start(ctx); err == nil {
		t.Fatal("start with b's history unreadable succeeded")
	}
	// The relay prepares the stream, and fails on the history too.
	waitFor(t, "the relay's failed preparation", func() (bool, string) {
		n := g.counter(t, "hookgate_outbox_publish_errors_total", "")
		return n > 0, fmt.Sprintf("%v publish errors", n)
	})
	if _, err := g.Broker().JetStream().Consumer(ctx, g.Broker().Stream(), "route_b"); err != nil {
		t.Errorf("b's consumer with its removal not recorded: %v; want it kept", err)
	}
}

// A store of a build before routes_configured (the key unset) that saw a
// route removed, and one whose history predates route_takes: the first
// start without routes_configured takes every route with a since as the
// last start's, so a route removed then, or before, is given anew what
// it had not finished when it is configured again. (Its removal was not
// noted: it never came back.)
func TestRouteBackAfterUpgrade(t *testing.T) {
	ds := newDownstream(t, func(w http.ResponseWriter, r *http.Request, n int) int {
		status := http.StatusOK
		if r.URL.Path == "/b" && r.Header.Get("X-Hookgate-Attempt") == "1" {
			status = http.StatusInternalServerError
		}
		w.WriteHeader(status)
		return status
	})
	dir := t.TempDir()
	cfg := func(routes string) *config.Config { return dirConfig(t, dir, "", routes) }
	a := routeYAML("a", ds.URL+"/a", "")
	both := a + routeYAML("b", ds.URL+"/b", ", retries: 0, schedule: [4s]")
	g := restart(t, cfg(both))
	g.send(t, "evt_open", "invoice.paid")
	g.waitState(t, "b", "stripe", "evt_open", store.StateRetrying)
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	withStore(t, g.cfg.Store.Path, func(st *store.Store) {
		for _, k := range []string{"routes_configured", "route_takes:b"} { // as an earlier build left them
			if err := st.SetMeta(ctx, k, ""); err != nil {
				t.Fatal(err)
			}
		}
	})
	g = restart(t, cfg(a)) // b removed: its consumer deleted
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	g = restart(t, cfg(both))
	g.waitState(t, "b", "stripe", "evt_open", store.StateSucceeded)
}
