package outbound_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/hookgate/hookgate/store"
)

// A replay of a parked event (refused by the broker for its content,
// never published) whose round fails follows the route's schedule: the
// event is put back in the outbox anew, as for a published one, and its
// message carries the next round. The broker takes it now (its max
// payload was raised), so route b, which took it and was never sent it,
// gets it too.
func TestFailedReplayOfParkedEventFollowsSchedule(t *testing.T) {
	ds := newDownstream(t, func(w http.ResponseWriter, r *http.Request, n int) int {
		status := http.StatusOK
		if r.URL.Path == "/a" && r.Header.Get("X-Hookgate-Attempt") == "1" {
			status = http.StatusInternalServerError
		}
		w.WriteHeader(status)
		return status
	})
	const later = ", retries: 0, schedule: [200ms, 200ms]"
	g := beforeStart(t, baseConfig(t, routeYAML("a", ds.URL+"/a", later)+routeYAML("b", ds.URL+"/b", "")),
		func(st *store.Store) {
			ev := &store.Event{Source: "stripe", ID: "evt_big", Type: "invoice.paid", ContentType: "application/json",
				Body: []byte(`{"id":"evt_big"}`), ReceivedAt: time.Now()}
			if dup, err := st.Claim(context.Background(), ev); err != nil || dup {
				t.Fatalf("claim: dup=%v err=%v", dup, err)
			}
			if err := st.Park(context.Background(), ev.Seq, "nats: maximum payload exceeded", time.Now()); err != nil {
				t.Fatal(err)
			}
		})
	if code, body := g.api(t, http.MethodPost, "/v1/events/stripe/evt_big/replay?route=a", apiToken); code != 202 {
		t.Fatalf("replay: %d %s", code, body)
	}
	if d := g.waitState(t, "a", "stripe", "evt_big", store.StateSucceeded); d.Attempts != 2 || d.Rounds != 1 {
		t.Errorf("a: %d attempts, %d rounds; want 2 and 1 (the replay's failed round, the schedule's next)", d.Attempts, d.Rounds)
	}
	g.waitState(t, "b", "stripe", "evt_big", store.StateSucceeded)
	parked, err := g.Store().Parked(context.Background(), 0, 10)
	if err != nil || len(parked) != 0 {
		t.Errorf("parked after the event was published anew: %+v, %v; want none", parked, err)
	}
}
