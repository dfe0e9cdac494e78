package outbound_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/store"
)

// Waiting for a route's rate is not part of an attempt: with more
// deliveries at once than the rate lets through within the route's
// timeout, each is sent once and succeeds. (Waited for inside the
// attempt, the wait ran into the timeout: attempts failed with "rate:
// Wait(n=1) would exceed context deadline", nothing sent.)
func TestRateWaitIsNotAnAttempt(t *testing.T) {
	ds := newDownstream(t, nil)
	g := startGateway(t, baseConfig(t, routeYAML("r", ds.URL,
		", rate: 1, concurrency: 4, timeout: 1s, retries: 0, schedule: [1h], breaker_threshold: 0")))
	for i := range 4 {
		g.send(t, fmt.Sprintf("evt_%d", i), "a")
	}
	waitFor(t, "every delivery's round recorded", func() (bool, string) {
		done := 0
		for i := range 4 {
			if d := g.delivery(t, "r", "stripe", fmt.Sprintf("evt_%d", i)); d != nil && d.State != store.StatePending {
				done++
			}
		}
		return done == 4, fmt.Sprintf("%d of 4", done)
	})
	for i := range 4 {
		d := g.delivery(t, "r", "stripe", fmt.Sprintf("evt_%d", i))
		as, err := g.Store().Attempts(context.Background(), d.ID)
		if err != nil {
			t.Fatal(err)
		}
		if d.State != store.StateSucceeded || len(as) != 1 {
			t.Errorf("evt_%d: %s after %d attempts (%+v); want succeeded at the first", i, d.State, len(as), as)
		}
	}
	if n := len(ds.requests()); n != 4 {
		t.Errorf("the downstream got %d requests, want 4", n)
	}
}

// A route's failed rounds do not close another route's idle connections
// (go-retryablehttp closes its client's idle connections after each
// failed round, and the routes share one transport).
func TestFailingRouteKeepsOthersConnections(t *testing.T) {
	var conns atomic.Int32
	good := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	good.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	good.Start()
	t.Cleanup(good.Close)
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }))
	t.Cleanup(bad.Close)
	g := startGateway(t, baseConfig(t,
		routeYAML("good", good.URL, `, events: ["good.*"], concurrency: 1`)+
			routeYAML("bad", bad.URL, `, events: ["bad.*"], retries: 0, schedule: [1h]`)))
	for i := range 5 {
		g.send(t, fmt.Sprintf("evt_good_%d", i), "good.x")
		g.waitState(t, "good", "stripe", fmt.Sprintf("evt_good_%d", i), store.StateSucceeded)
		g.send(t, fmt.Sprintf("evt_bad_%d", i), "bad.x")
		g.waitState(t, "bad", "stripe", fmt.Sprintf("evt_bad_%d", i), store.StateRetrying)
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("route good opened %d connections for 5 requests one after another, want 1", n)
	}
}

// A round stopped while it waits for the route's rate records no attempt:
// nothing was sent. (It recorded a failed "context canceled" attempt, and
// the first request the downstream got said X-Hookgate-Attempt 2.)
func TestRateWaitAtStopRecordsNoAttempt(t *testing.T) {
	ds := newDownstream(t, nil)
	g := startGateway(t, baseConfig(t, routeYAML("r", ds.URL, ", rate: 0.1")))
	g.send(t, "evt_1", "invoice.paid")
	g.waitState(t, "r", "stripe", "evt_1", store.StateSucceeded)
	g.send(t, "evt_2", "invoice.paid") // waits about 10 s for the rate
	// Let its round reach the wait; if it has not yet, the test proves less
	// but does not fail.
	time.Sleep(500 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := g.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(ds.requests()); n != 1 {
		t.Fatalf("the downstream got %d requests before the stop, want 1", n)
	}
	g2 := restart(t, g.cfg)
	var first string
	waitFor(t, "evt_2 sent", func() (bool, string) {
		for _, r := range ds.requests() {
			if r.eventID == "evt_2" {
				first = r.attempt
				return true, ""
			}
		}
		return false, "not yet"
	})
	if first != "1" {
		d := g2.delivery(t, "r", "stripe", "evt_2")
		t.Fatalf("the first request of evt_2 says X-Hookgate-Attempt %s (delivery %+v)", first, *d)
	}
}
