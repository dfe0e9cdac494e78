package outbound_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/store"
)

// A replay to a route that had no delivery of the event (a route added
// after its receipt, which is not given it) whose round fails follows the route's schedule,
// as a failed round of a new event does: nothing else carries that
// delivery's next round. One route's downstream answers once 500 then
// 200 (succeeded at the schedule's next round), the other's always 500
// (dead past its last step). The route that had delivered it is not sent
// it again.
func TestFailedReplayOfNewDeliveryFollowsSchedule(t *testing.T) {
	ds := newDownstream(t, func(w http.ResponseWriter, r *http.Request, n int) int {
		status := http.StatusOK
		if r.Header.Get("X-Hookgate-Event-Id") == "evt_cus" && (r.URL.Path == "/always" ||
			r.URL.Path == "/once" && r.Header.Get("X-Hookgate-Attempt") == "1") {
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
	// Acked and dropped by the interest stream: the routes added next are
	// not given it.
	waitStreamEmpty(t, g)
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	const later = ", retries: 0, schedule: [200ms, 200ms]"
	g = restart(t, cfg(routeYAML("a", ds.URL+"/a", "")+routeYAML("once", ds.URL+"/once", later)+
		routeYAML("always", ds.URL+"/always", later)))
	// Recovery runs before the relay publishes: once evt_next is
	// delivered, the start put nothing back in the outbox after it.
	g.send(t, "evt_next", "invoice.paid")
	for _, route := range []string{"a", "once", "always"} {
		g.waitState(t, route, "stripe", "evt_next", store.StateSucceeded)
	}
	for _, route := range []string{"once", "always"} {
		if d := g.delivery(t, route, "stripe", "evt_cus"); d != nil {
			t.Fatalf("route %s has a delivery before the replay: %+v", route, d)
		}
	}
	if code, body := g.api(t, http.MethodPost, "/v1/events/stripe/evt_cus/replay?route=once", apiToken); code != 202 {
		t.Fatalf("replay to once: %d %s", code, body)
	}
	waitFor(t, "the replay's request to once", func() (bool, string) {
		return len(ds.requests()) == 5, fmt.Sprint(len(ds.requests()), " requests")
	})
	if code, body := g.api(t, http.MethodPost, "/v1/events/stripe/evt_cus/replay?route=always", apiToken); code != 202 {
		t.Fatalf("replay to always: %d %s", code, body)
	}
	if d := g.waitState(t, "once", "stripe", "evt_cus", store.StateSucceeded); d.Attempts != 2 || d.Rounds != 1 {
		t.Errorf("once: %d attempts, %d rounds; want 2 and 1 (the replay's failed round, the schedule's next)", d.Attempts, d.Rounds)
	}
	if d := g.waitState(t, "always", "stripe", "evt_cus", store.StateDead); d.Attempts != 3 {
		t.Errorf("always: %d attempts, want 3 (the replay's and the schedule's two)", d.Attempts)
	}
	count := map[string]int{}
	for _, r := range ds.requests() {
		count[strings.TrimPrefix(r.path, "/")]++
	}
	if count["a"] != 2 || count["once"] != 3 || count["always"] != 4 {
		t.Errorf("requests by route %v; want a 2, once 3, always 4 (evt_next once each)", count)
		for _, r := range ds.requests() {
			t.Logf("%s %s attempt %s %d", r.path, r.eventID, r.attempt, r.status)
		}
	}
}
