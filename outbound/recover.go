package outbound

import (
	"context"
	"errors"
	"fmt"
	"slices"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/jetstream"
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
// stream lost (relay.Owed). reset also holds the events a route configured
// again had not finished when it was removed (owedBack).
func (e *Engine) Owed(ctx context.Context, afterStreamSeq int64) (lost, pending, reset []int64, err error) {
	if err := e.loadSince(ctx); err != nil {
		return nil, nil, nil, err
	}
	if err := e.agreeConsumers(ctx); err != nil {
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
	if reset, err = e.owedBack(ctx, reset); err != nil {
		return nil, nil, nil, err
	}
	return lost, pending, reset, nil
}

// owedBack adds to reset the published events that a route configured
// again (routes_back) had not finished when it was removed, whose
// messages were deleted with its consumer: its deliveries not terminal
// (published anew, a retrying one's round waits for its next attempt) and
// the events it took with no delivery of them. Those it did not take, as
// the events received while it was gone, are left out. Requeued forgets
// the routes once their events are back in the outbox.
func (e *Engine) owedBack(ctx context.Context, reset []int64) ([]int64, error) {
	back, err := e.routesBack(ctx)
	if err != nil {
		return nil, err
	}
	var rs []*route
	routes := map[string]store.RouteTakes{}
	for _, name := range back {
		if r := e.byName[name]; r != nil {
			rs = append(rs, r)
			routes[name] = store.RouteTakes{Sources: r.cfg.Sources, Since: r.since.Load()}
		}
	}
	err = e.store.PublishedSince(ctx, -1, routes, func(ev *store.Event, deliveries map[string]bool) error {
		received := ev.ReceivedAt.UnixMilli()
		for _, r := range rs {
			terminal, has := deliveries[r.cfg.Name]
			if r.matches(ev.Source, ev.Type) && owes(has, terminal, r.took(received, ev.Source, ev.Type)) {
				reset = append(reset, ev.Seq)
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	e.sinceMu.Lock()
	e.backOwed = back
	e.sinceMu.Unlock()
	return reset, nil
}

// Requeued is told by the relay that what Owed returned is back in the
// outbox: the routes configured again it gave the events of are taken
// out of routes_back.
func (e *Engine) Requeued(ctx context.Context) error {
	e.sinceMu.Lock()
	defer e.sinceMu.Unlock()
	if len(e.backOwed) == 0 {
		return nil
	}
	back, err := e.routesBack(ctx)
	if err != nil {
		return err
	}
	back = slices.DeleteFunc(back, func(name string) bool { return slices.Contains(e.backOwed, name) })
	if err := e.setRoutesBack(ctx, back); err != nil {
		return err
	}
	e.backOwed = nil
	return nil
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

// agreeConsumers lowers each route's since to its consumer's creation
// (agreeSince) before Owed reads it: the puller does only after Start, and
// the relay's recovery, before it, would not owe a route the events
// received between another gateway's making of its consumer and this
// gateway's since. A consumer not there yet (made with the stream) has
// nothing to say.
func (e *Engine) agreeConsumers(ctx context.Context) error {
	if e.broker == nil {
		return nil
	}
	js := e.broker.JetStream()
	if js == nil {
		return nil // not started: recovery's stream lookup fails first
	}
	for _, r := range e.routes {
		// Asked again at the consumer's election: on a new NATS cluster
		// it may have no leader yet.
		cons, err := jetstream.Answered(ctx, e.broker.UntilElected, func(ctx context.Context) (natsjs.Consumer, error) {
			return js.Consumer(ctx, e.broker.Stream(), r.consumer)
		})
		if errors.Is(err, natsjs.ErrConsumerNotFound) || errors.Is(err, natsjs.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("route %s: its consumer: %w", r.cfg.Name, err)
		}
		e.agreeSince(ctx, r, cons.CachedInfo().Created)
	}
	return nil
}
