package outbound_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/store"
)

// A replay to one route added after the event, whose round fails, has
// the event published anew; another route added after it, which has no
// delivery of it, acks that copy: the event was never its own. (It ran a
// first round and delivered it.)
func TestReplayToOneRouteLeavesAnotherNewRoute(t *testing.T) {
	outbound.SetReceiptSkew(t, 0) // the routes come a moment after the event
	ds := newDownstream(t, func(w http.ResponseWriter, r *http.Request, n int) int {
		status := http.StatusOK
		if r.Header.Get("X-Hookgate-Event-Id") == "evt_cus" && r.URL.Path == "/once" && r.Header.Get("X-Hookgate-Attempt") == "1" {
			status = http.StatusInternalServerError
		}
		w.WriteHeader(status)
		return status
	})
	dir := t.TempDir()
	cfg := func(routes string) *config.Config {
		return dirConfig(t, dir, fmt.Sprintf("api: {tokens: [%q]}\n", apiToken), routes)
	}
	g := restart(t, cfg(routeYAML("a", ds.URL+"/a", "")))
	g.send(t, "evt_cus", "customer.created")
	g.waitState(t, "a", "stripe", "evt_cus", store.StateSucceeded)
	waitStreamEmpty(t, g)
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	const later = ", retries: 0, schedule: [200ms, 200ms]"
	g = restart(t, cfg(routeYAML("a", ds.URL+"/a", "")+routeYAML("once", ds.URL+"/once", later)+
		routeYAML("other", ds.URL+"/other", later)))
	g.send(t, "evt_next", "invoice.paid")
	for _, route := range []string{"a", "once", "other"} {
		g.waitState(t, route, "stripe", "evt_next", store.StateSucceeded)
	}
	if code, body := g.api(t, http.MethodPost, "/v1/events/stripe/evt_cus/replay?route=once", apiToken); code != 202 {
		t.Fatalf("replay to once: %d %s", code, body)
	}
	g.waitState(t, "once", "stripe", "evt_cus", store.StateSucceeded)
	waitStreamEmpty(t, g) // every route's consumer acked the copy
	if d := g.delivery(t, "other", "stripe", "evt_cus"); d != nil {
		t.Errorf("route other, never given evt_cus nor replayed it, has a delivery of it: %+v", d)
	}
}

// waitStreamEmpty waits until the events stream holds no message: every
// route's consumer acked every one (interest retention).
func waitStreamEmpty(t *testing.T, g *gateway) {
	t.Helper()
	waitFor(t, "the stream empty", func() (bool, string) {
		s, err := g.Broker().JetStream().Stream(context.Background(), g.Broker().Stream())
		if err != nil {
			return false, err.Error()
		}
		info, err := s.Info(context.Background())
		if err != nil {
			return false, err.Error()
		}
		return info.State.Msgs == 0, fmt.Sprint(info.State.Msgs, " messages")
	})
}
