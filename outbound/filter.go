package outbound

import (
	"context"
	"time"

	"github.com/hookgate/hookgate/expr"
	"github.com/hookgate/hookgate/store"
)

// filterLogEvery is how often a route's filter errors are logged at most
// (each is counted).
const filterLogEvery = time.Minute

// maxFilterErrLen bounds a filter error as recorded and logged.
const maxFilterErrLen = 200

// pass evaluates r's filter on ev: whether the route takes it, or why the
// filter could not say. The body is parsed only if the filter reads it.
func (r *route) pass(ev *envelope) (bool, error) {
	in := expr.Input{Source: ev.source, Type: ev.typ}
	if r.filter.Uses(expr.Body) {
		body, _, err := expr.ParseBody(ev.body)
		if err != nil {
			return false, err
		}
		in.Body = body
	}
	return r.filter.Bool(&in)
}

// filtered runs r's filter on ev, due a round at prev; if the filter
// rejects it, it records the delivery filtered and returns true with
// the message's fate. A filter error is counted and logged at most once
// per route and filterLogEvery.
func (e *Engine) filtered(ctx context.Context, r *route, ev envelope, prev store.DeliveryStatus) (bool, action) {
	if r.filter == nil {
		return false, action{}
	}
	ok, evalErr := r.pass(&ev)
	run, dec := screen(prev, ok, evalErr)
	if run {
		return false, action{}
	}
	d := &store.Delivery{EventSeq: ev.seq, Route: r.cfg.Name, Source: ev.source, EventID: ev.id, EventType: ev.typ,
		IdempotencyKey: IdempotencyKey(r.cfg.Name, ev.source, ev.id), State: dec.next.state, Rounds: dec.next.rounds,
		LastError: dec.next.lastError}
	if err := e.state.Record(context.WithoutCancel(ctx), d, nil); err != nil {
		e.log.Error("cannot record a filtered delivery; it will be filtered again", "route", r.cfg.Name,
			"source", ev.source, "event_id", ev.id, "err", err)
		return true, dec.unrecorded(ctx.Err() != nil).then
	}
	e.cfg.Metrics.filtered(r.cfg.Name, evalErr != nil)
	if evalErr != nil {
		now := time.Now().UnixNano()
		if last := r.filterLogged.Load(); now-last >= int64(filterLogEvery) && r.filterLogged.CompareAndSwap(last, now) {
			e.log.Warn("route filter failed; the event is filtered (logged once a minute per route)", "route", r.cfg.Name,
				"source", ev.source, "event_id", ev.id, "err", dec.next.lastError)
		}
	} else {
		e.log.Debug("filtered", "route", r.cfg.Name, "source", ev.source, "event_id", ev.id)
	}
	return true, dec.then
}
