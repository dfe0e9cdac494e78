package outbound

import (
	"context"

	"github.com/hookgate/hookgate/store"
)

// Owed returns the intake sequences of the published events whose stream
// sequence is past afterStreamSeq (every published event when it is
// negative) that some route takes (its sources and event filters) and
// still needs (owes), and those of the events of every pending delivery
// of a configured route: an operator's retry or replay cut short by a
// stop or a crash, or a replay's new delivery whose failed round was
// recorded before its event was published anew (reset), or a delivery
// whose message is still in the stream (pending). The relay asks it to put back in the outbox what the
// stream lost (relay.Owed).
func (e *Engine) Owed(ctx context.Context, afterStreamSeq int64) (lost, pending, reset []int64, err error) {
	if err := e.loadSince(ctx); err != nil {
		return nil, nil, nil, err
	}
	routes := make(map[string]store.RouteTakes, len(e.routes))
	for _, r := range e.routes {
		routes[r.cfg.Name] = store.RouteTakes{Sources: r.cfg.Sources, Since: r.since.Load()}
	}
	err = e.store.PublishedSince(ctx, afterStreamSeq, routes, func(ev *store.Event, deliveries map[string]bool) error {
		received := ev.ReceivedAt.UnixMilli()
		for _, r := range e.routes {
			terminal, has := deliveries[r.cfg.Name]
			if r.matches(ev.Source, ev.Type) && owes(has, terminal, r.took(received, ev.Source, ev.Type)) {
				lost = append(lost, ev.Seq)
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, nil, err
	}
	err = e.store.PendingDeliveries(ctx, func(seq int64, route, source, eventType string, operator bool) error {
		switch r := e.byName[route]; {
		case r == nil || !r.matches(source, eventType):
		case operator:
			reset = append(reset, seq)
		default:
			pending = append(pending, seq)
		}
		return nil
	})
	if err != nil {
		return nil, nil, nil, err
	}
	return lost, pending, reset, nil
}

// owes reports whether a route that takes an event still needs it: its
// delivery of it (has) is not terminal, or it has none and the route took
// the event when it was received (took: configured then, its sources and
// events matched). A route added later, or widened later, was never given
// the older events, and is not given them when the stream is made anew.
func owes(has, terminal, took bool) bool {
	if has {
		return !terminal
	}
	return took
}
