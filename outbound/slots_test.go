package outbound_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// A route's concurrency bounds its requests in flight, not its rounds:
// while every slot's request is held, 4 rounds per slot have taken a
// message (the others wait for a slot, as rounds waiting for the store
// do), and no more requests than slots are ever made at once.
func TestRoundsBeyondConcurrencyWaitForASlot(t *testing.T) {
	release := make(chan struct{})
	ds := newDownstream(t, func(w http.ResponseWriter, r *http.Request, n int) int {
		<-release
		w.WriteHeader(204)
		return 204
	})
	// A timeout far past the waits below: a held attempt must not end
	// and be retried while the test reads the counts.
	g := startGateway(t, baseConfig(t, routeYAML("slots", ds.URL, ", concurrency: 2, timeout: 2m")))
	t.Cleanup(func() { // on failure, before the gateway stops
		select {
		case <-release:
		default:
			close(release)
		}
	})
	ctx := context.Background()
	js := g.Broker().JetStream()
	var cons natsjs.Consumer
	waitFor(t, "the route's consumer", func() (bool, string) {
		var err error
		cons, err = js.Consumer(ctx, g.Broker().Stream(), "route_slots")
		return err == nil, fmt.Sprint(err)
	})
	const events = 20
	for i := range events {
		g.send(t, fmt.Sprintf("evt_%d", i), "invoice.paid")
	}
	waitFor(t, "2 requests held and 8 messages taken", func() (bool, string) {
		if n := ds.inflight.Load(); n > 2 {
			t.Fatalf("%d requests in flight at concurrency 2", n)
		}
		ci, err := cons.Info(ctx)
		if err != nil {
			return false, err.Error()
		}
		return ds.inflight.Load() == 2 && ci.NumAckPending == 8,
			fmt.Sprintf("%d in flight, ack pending %d, pending %d", ds.inflight.Load(), ci.NumAckPending, ci.NumPending)
	})
	close(release)
	waitFor(t, "every event delivered", func() (bool, string) {
		n := len(ds.succeeded())
		return n == events, fmt.Sprint(n)
	})
	if p := ds.peak.Load(); p != 2 {
		t.Fatalf("peak concurrency = %d, want 2", p)
	}
}
