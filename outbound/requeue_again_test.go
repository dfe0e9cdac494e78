package outbound_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/hookgate/hookgate/store"
)

// An operator's retry cut short is published anew at the next start; when
// the round of that new message is itself cut short by a stop, its message
// is still the route's (handed back), so the start after that must not
// publish yet another copy: the reset is done with once its event is
// requeued anew. The stream (limits retention) holds the
// event's first message and the one requeued copy, not one more per
// restart.
func TestRequeuedCopyCutShortIsNotPublishedAnewAgain(t *testing.T) {
	release := make(chan struct{})
	ds := newDownstream(t, func(w http.ResponseWriter, r *http.Request, n int) int {
		switch {
		case n < 2: // both rounds of the schedule fail
			w.WriteHeader(500)
			return 500
		case n == 2, n == 3: // the operator's retry, then the requeued copy's round: held until the stop
			select {
			case <-release:
			case <-r.Context().Done(): // the stop cut it short: no longer in flight
				return 0
			}
		}
		w.WriteHeader(204)
		return 204
	})
	t.Cleanup(func() { close(release) })
	g := startGateway(t, eventsConfig(t, routeYAML("r", ds.URL, ", retries: 0, schedule: [10ms]"))+
		"nats: {retention: limits, duplicate_window: 10m}\n")
	cfg := g.cfg
	g.send(t, "evt_retried", "invoice.paid")
	d := g.waitState(t, "r", "stripe", "evt_retried", store.StateDead)
	if code, body := g.api(t, http.MethodPost, "/v1/deliveries/"+d.UID+"/retry", apiToken); code != 202 {
		t.Fatalf("retry: %d %s", code, body)
	}
	g = restartDuringHeldRequest(t, g, ds, cfg) // the operator's round cut short
	waitFor(t, "the requeued copy's round held", func() (bool, string) {
		return len(ds.requests()) == 4 && ds.inflight.Load() == 1, fmt.Sprint(len(ds.requests()), " requests")
	})
	g = restartDuringHeldRequest(t, g, ds, cfg) // the requeued copy's (normal) round cut short
	g.waitState(t, "r", "stripe", "evt_retried", store.StateSucceeded)
	s, err := g.Broker().JetStream().Stream(context.Background(), g.Broker().Stream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		var ids []string
		for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
			if m, err := s.GetMsg(context.Background(), seq); err == nil {
				ids = append(ids, m.Header.Get("Nats-Msg-Id"))
			}
		}
		t.Fatalf("the stream holds %d messages of the one event %v, want 2 (its first and one requeued copy)", info.State.Msgs, ids)
	}
}
