package outbound

import (
	"context"

	"github.com/hookgate/hookgate/store"
)

// Owed returns the intake sequences of the published events whose stream
// sequence is past afterStreamSeq (every published event when it is
// negative) that some route takes (its sources and event filters) and has
// not finished, and those of the events of every pending delivery of a
// configured route (an operator's retry or replay cut short by a stop or
// a crash, or a delivery whose message is still in the stream). The relay
// asks it to put back in the outbox what the stream lost (relay.Owed).
func (e *Engine) Owed(ctx context.Context, afterStreamSeq int64) (lost, pending []int64, err error) {
	sources := make(map[string][]string, len(e.routes))
	for _, r := range e.routes {
		sources[r.cfg.Name] = r.cfg.Sources
	}
	err = e.store.PublishedSince(ctx, afterStreamSeq, sources, func(ev *store.Event, terminal map[string]bool) error {
		for _, r := range e.routes {
			if r.matches(ev.Source, ev.Type) && !terminal[r.cfg.Name] {
				lost = append(lost, ev.Seq)
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	err = e.store.PendingDeliveries(ctx, func(seq int64, route, source, eventType string) error {
		if r := e.byName[route]; r != nil && r.matches(source, eventType) {
			pending = append(pending, seq)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return lost, pending, nil
}
