package outbound

import (
	"context"
	"errors"
	"fmt"

	"github.com/hookgate/hookgate/store"
)

// ErrNoRoute is returned by Replay when no configured route takes the
// event now (or the route asked for does not take it).
var ErrNoRoute = errors.New("no route takes this event")

// replayStore is what Replay reads and resets.
type replayStore interface {
	GetEvent(ctx context.Context, source, id string) (*store.Event, error)
	ResetDelivery(ctx context.Context, d *store.Delivery, rec *store.StateRecord) (*store.Delivery, error)
}

// Replay delivers a stored event again, now, to every route that takes it
// under the current configuration, or only to routeName when it is not
// empty.
// Each delivery is set to pending (created if the route never had it) and
// one round runs in the background with the delivery's Idempotency-Key, as
// for an operator retry; a delivery that already succeeded is sent again.
// A failed replay round leaves the delivery's state and schedule as they
// were (a new delivery goes on on the route's schedule, its event
// published anew). It returns
// the deliveries as reset. A delivery with an operator's round queued
// already makes it ErrRoundQueued, and a paused route ErrRoutePaused,
// with nothing reset; in cluster mode so does a round of one running
// under its lease, and the reset is the cluster's before Replay returns.
func (e *Engine) Replay(ctx context.Context, source, eventID, routeName string) ([]*store.Delivery, error) {
	ev, err := e.replay.GetEvent(ctx, source, eventID)
	if err != nil {
		return nil, err
	}
	env, err := identity(ev)
	if err != nil {
		return nil, err
	}
	targets, err := e.replayTargets(ev, routeName)
	if err != nil {
		return nil, err
	}
	for _, r := range targets {
		if r.breaker.state() == RoutePaused {
			return nil, fmt.Errorf("%w: %s", ErrRoutePaused, r.cfg.Name)
		}
	}
	scopes := make([]string, len(targets))
	for i, r := range targets {
		scopes[i] = e.manualScope(ctx, r, env)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.abort == nil {
		return nil, ErrNotRunning
	}
	for i, r := range targets {
		if err := e.manualRoom(r, env.key(r), scopes[i], false); err != nil {
			return nil, err
		}
		if len(e.manual)+i >= MaxManualRounds {
			return nil, ErrBusy
		}
	}
	// The states before the reset (a round that fails keeps its state),
	// read before the shared state says pending.
	keys := make([]DeliveryKey, len(targets))
	prevs := make([]store.DeliveryStatus, len(targets))
	for i, r := range targets {
		keys[i] = env.key(r)
		prev, err := e.state.Status(ctx, r.cfg.Name, ev.Seq, ev.Source, ev.ID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		prevs[i] = prev
	}
	recs, undo, err := e.resetShared(ctx, keys, true)
	if err != nil {
		return nil, err
	}
	defer e.recorded(recs)
	out := make([]*store.Delivery, 0, len(targets))
	for i, r := range targets {
		prev := prevs[i]
		d, err := e.replay.ResetDelivery(ctx, &store.Delivery{EventSeq: ev.Seq, Route: r.cfg.Name, Source: ev.Source, EventID: ev.ID,
			EventType: ev.Type, IdempotencyKey: IdempotencyKey(r.cfg.Name, ev.Source, ev.ID)}, recs[i])
		if err != nil {
			undo() // a round already queued runs all the same
			return out, err
		}
		out = append(out, d)
		e.startManual(r, env, scopes[i], prev, true, nil)
	}
	return out, nil
}

// replayTargets are the routes a replay of ev goes to: routeName, or every
// route that takes it.
func (e *Engine) replayTargets(ev *store.Event, routeName string) ([]*route, error) {
	if routeName != "" {
		r := e.byName[routeName]
		if r == nil {
			return nil, fmt.Errorf("%w: %q", ErrUnknownRoute, routeName)
		}
		if !r.matches(ev.Source, ev.Type) {
			return nil, fmt.Errorf("%w: route %q does not take %s events of type %q", ErrNoRoute, routeName, ev.Source, ev.Type)
		}
		return []*route{r}, nil
	}
	var targets []*route
	for _, r := range e.routes {
		if r.matches(ev.Source, ev.Type) {
			targets = append(targets, r)
		}
	}
	if len(targets) == 0 {
		return nil, ErrNoRoute
	}
	return targets, nil
}

// Consumers returns the durable JetStream consumer of each route, by route
// name (readiness checks that they exist).
func (e *Engine) Consumers() map[string]string {
	out := make(map[string]string, len(e.routes))
	for _, r := range e.routes {
		out[r.cfg.Name] = r.consumer
	}
	return out
}
