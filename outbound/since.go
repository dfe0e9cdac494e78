package outbound

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/jetstream"
	"github.com/hookgate/hookgate/store"
)

// A route added to a running installation is not owed the events
// received before it: retention does not wait for it on them (Finished),
// a stream made anew does not get them back for it (Owed), and its
// consumer acks, without a delivery, a copy of one published anew for
// another route (admit, tookMessage). (It is given what the stream still
// holds for it when it comes.) The
// store's meta key route_since:<name> holds when the route was first
// configured (unix ms), lowered to its consumer's creation (agreeSince:
// in a cluster, the first gateway's). On the first start that records
// it, a store with events of its own (an earlier build's) takes every
// configured route as configured from the start; a new one, joining a
// cluster with the records' copies of others' events, from now, lowered
// so to the consumer's.
//
// Likewise a route whose sources or events change is given only the
// events received after the change: route_takes:<name> holds what the
// route took since when (the last routeTakesKept changes), and an event
// is the route's only if the route took it when it was received. A route
// removed takes nothing from the first start without it on (its consumer
// is deleted with it): routes_configured holds the routes of the last
// start (unset by an earlier build: every route with a since). A route configured again is given anew what it had not finished
// (Owed; its deletion took their messages): routes_back holds those
// routes until their events are back in the outbox (Requeued).
const (
	routeSincePrefix = "route_since:"
	routesSinceKept  = "routes_since_kept"
	routeTakesPrefix = "route_takes:"
	routeTakesKept   = 32
	routesConfigured = "routes_configured"
	routesBack       = "routes_back"
)

// takes is what a route took from Since on (unix ms).
type takes struct {
	Since   int64    `json:"since"`
	Sources []string `json:"sources"`
	Events  []string `json:"events,omitempty"`
}

func (t takes) matches(source, eventType string) bool {
	if !slices.Contains(t.Sources, source) {
		return false
	}
	if len(t.Events) == 0 {
		return true
	}
	return slices.ContainsFunc(t.Events, func(g string) bool { return Glob(g, eventType) })
}

func (t takes) same(sources, events []string) bool {
	return slices.Equal(t.Sources, sources) && slices.Equal(t.Events, events)
}

// nextTakes is history with what the route takes now, from now on, if that
// changed (at most routeTakesKept kept, the oldest dropped), and whether
// it changed. An empty history starts at since, the route's first
// configuration.
func nextTakes(history []takes, since, now int64, sources, events []string) ([]takes, bool) {
	sources, events = slices.Sorted(slices.Values(sources)), slices.Sorted(slices.Values(events))
	if len(history) == 0 {
		return []takes{{Since: since, Sources: sources, Events: events}}, true
	}
	if history[len(history)-1].same(sources, events) {
		return history, false
	}
	history = append(history, takes{Since: max(now, history[len(history)-1].Since), Sources: sources, Events: events})
	if len(history) > routeTakesKept {
		history = history[len(history)-routeTakesKept:]
	}
	return history, true
}

// tookAt reports whether a route with this history took an event of source
// and type received at (unix ms): what it took then matched it. An event
// received before the oldest change kept is taken as the route's.
func tookAt(history []takes, received int64, source, eventType string) bool {
	i, found := slices.BinarySearchFunc(history, received, func(t takes, at int64) int {
		switch {
		case t.Since < at:
			return -1
		case t.Since > at:
			return 1
		}
		return 0
	})
	if found {
		for i+1 < len(history) && history[i+1].Since == received {
			i++
		}
	} else {
		i--
	}
	if i < 0 {
		return true
	}
	return history[i].matches(source, eventType)
}

// loadSince reads, or records, when each route was first configured and
// what it took since when, once.
func (e *Engine) loadSince(ctx context.Context) error {
	if e.store == nil {
		return nil
	}
	e.sinceMu.Lock()
	defer e.sinceMu.Unlock()
	if e.sinceLoaded {
		return nil
	}
	kept, err := e.store.Meta(ctx, routesSinceKept)
	if err != nil {
		return fmt.Errorf("read %s: %w", routesSinceKept, err)
	}
	fromStart := false
	if kept == "" {
		if fromStart, err = e.store.HasOwnEvents(ctx); err != nil {
			return err
		}
	}
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	for _, r := range e.routes {
		v, err := e.store.Meta(ctx, routeSincePrefix+r.cfg.Name)
		if err != nil {
			return fmt.Errorf("route %s: read since: %w", r.cfg.Name, err)
		}
		if v == "" {
			v = now
			if fromStart {
				v = "0"
			}
			if err := e.store.SetMeta(ctx, routeSincePrefix+r.cfg.Name, v); err != nil {
				return fmt.Errorf("route %s: record since: %w", r.cfg.Name, err)
			}
		}
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("route %s: since %q: %w", r.cfg.Name, v, err)
		}
		r.since.Store(ms)
		if err := e.loadTakes(ctx, r, ms); err != nil {
			return err
		}
	}
	if err := e.noteRemoved(ctx); err != nil {
		return err
	}
	if kept == "" {
		if err := e.store.SetMeta(ctx, routesSinceKept, "1"); err != nil {
			return err
		}
	}
	e.sinceLoaded = true
	return nil
}

// loadTakes reads the route's history of what it takes, adding its
// current sources and events if they changed.
func (e *Engine) loadTakes(ctx context.Context, r *route, since int64) error {
	key := routeTakesPrefix + r.cfg.Name
	v, err := e.store.Meta(ctx, key)
	if err != nil {
		return fmt.Errorf("route %s: read what it takes: %w", r.cfg.Name, err)
	}
	var history []takes
	if v != "" {
		if err := json.Unmarshal([]byte(v), &history); err != nil {
			return fmt.Errorf("route %s: what it takes %q: %w", r.cfg.Name, v, err)
		}
	}
	if n := len(history); n > 0 && len(history[n-1].Sources) == 0 {
		// Removed, and configured again: noted before its history says
		// it takes again.
		if err := e.noteBack(ctx, r.cfg.Name); err != nil {
			return err
		}
	}
	history, changed := nextTakes(history, since, time.Now().UnixMilli(), r.cfg.Sources, r.cfg.Events)
	if changed {
		b, err := json.Marshal(history)
		if err != nil {
			return fmt.Errorf("route %s: what it takes: %w", r.cfg.Name, err)
		}
		if err := e.store.SetMeta(ctx, key, string(b)); err != nil {
			return fmt.Errorf("route %s: record what it takes: %w", r.cfg.Name, err)
		}
	}
	r.takes.Store(&history)
	return nil
}

// noteRemoved records that each route configured at the last start and
// not now takes nothing from now on, and notes the routes configured now.
func (e *Engine) noteRemoved(ctx context.Context) error {
	v, err := e.store.Meta(ctx, routesConfigured)
	if err != nil {
		return fmt.Errorf("read %s: %w", routesConfigured, err)
	}
	var last []string
	if v != "" {
		if err := json.Unmarshal([]byte(v), &last); err != nil {
			return fmt.Errorf("%s %q: %w", routesConfigured, v, err)
		}
	} else {
		// Not recorded (a store of an earlier build): every route with
		// a since was configured.
		keys, err := e.store.MetaKeys(ctx, routeSincePrefix)
		if err != nil {
			return fmt.Errorf("read the routes' since: %w", err)
		}
		for _, k := range keys {
			last = append(last, strings.TrimPrefix(k, routeSincePrefix))
		}
	}
	now := time.Now().UnixMilli()
	for _, name := range last {
		if e.byName[name] == nil {
			if err := e.takesNothing(ctx, name, now); err != nil {
				return err
			}
		}
	}
	names := make([]string, 0, len(e.routes))
	for _, r := range e.routes {
		names = append(names, r.cfg.Name)
	}
	slices.Sort(names)
	if slices.Equal(last, names) {
		return nil
	}
	b, err := json.Marshal(names)
	if err != nil {
		return err
	}
	if err := e.store.SetMeta(ctx, routesConfigured, string(b)); err != nil {
		return fmt.Errorf("record %s: %w", routesConfigured, err)
	}
	return nil
}

// noteBack adds name to routes_back.
func (e *Engine) noteBack(ctx context.Context, name string) error {
	back, err := e.routesBack(ctx)
	if err != nil {
		return err
	}
	if slices.Contains(back, name) {
		return nil
	}
	return e.setRoutesBack(ctx, append(back, name))
}

// routesBack reads routes_back: the routes configured again whose
// unfinished events are not yet back in the outbox.
func (e *Engine) routesBack(ctx context.Context) ([]string, error) {
	v, err := e.store.Meta(ctx, routesBack)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", routesBack, err)
	}
	var back []string
	if v != "" {
		if err := json.Unmarshal([]byte(v), &back); err != nil {
			return nil, fmt.Errorf("%s %q: %w", routesBack, v, err)
		}
	}
	return back, nil
}

func (e *Engine) setRoutesBack(ctx context.Context, back []string) error {
	v := ""
	if len(back) > 0 {
		b, err := json.Marshal(back)
		if err != nil {
			return err
		}
		v = string(b)
	}
	if err := e.store.SetMeta(ctx, routesBack, v); err != nil {
		return fmt.Errorf("record %s: %w", routesBack, err)
	}
	return nil
}

// takesNothing adds to the history of the removed route name that it
// takes nothing from now on (unless its history says so already). A
// route without a history (an earlier build's) is given one that says
// so: the events before are its own.
func (e *Engine) takesNothing(ctx context.Context, name string, now int64) error {
	key := routeTakesPrefix + name
	v, err := e.store.Meta(ctx, key)
	if err != nil {
		return fmt.Errorf("route %s (removed): read what it takes: %w", name, err)
	}
	history := []takes{}
	if v != "" {
		if err := json.Unmarshal([]byte(v), &history); err != nil {
			return fmt.Errorf("route %s (removed): what it takes %q: %w", name, v, err)
		}
	}
	history, changed := nextTakes(history, now, now, nil, nil)
	if !changed {
		return nil
	}
	b, err := json.Marshal(history)
	if err != nil {
		return fmt.Errorf("route %s (removed): what it takes: %w", name, err)
	}
	if err := e.store.SetMeta(ctx, key, string(b)); err != nil {
		return fmt.Errorf("route %s (removed): record what it takes: %w", name, err)
	}
	return nil
}

// took reports whether the route took an event of source and type
// received at (unix ms): it was configured then, and what it took then
// matched the event.
func (r *route) took(received int64, source, eventType string) bool {
	if received < r.since.Load() {
		return false
	}
	h := r.takes.Load()
	return h == nil || tookAt(*h, received, source, eventType)
}

// tookMessage reports whether the route takes the event of msg when it
// has no delivery of it. A copy published anew (an operator's reset,
// jetstream.Requeued) goes to every route that matches the event, so it
// is taken only if the route took the event when it was received, or
// receiptSkew later (the receipt time is another gateway's clock; a route
// given an event of just before it came loses nothing, and one narrowed
// just after it still takes it, as retention and Owed say). A first
// publication, or one published again under its first ID, is taken as
// it always was: a route added later is given what the stream still
// holds for it.
func (r *route) tookMessage(msg natsjs.Msg, ev envelope) bool {
	if h := r.takes.Load(); r.since.Load() == 0 && (h == nil || len(*h) <= 1) {
		return true // configured so from the start: it takes what it matches
	}
	hdr := msg.Headers()
	if !jetstream.Requeued(hdr) {
		return true
	}
	at, err := time.Parse(time.RFC3339Nano, hdr.Get(jetstream.HeaderReceivedAt))
	if err != nil {
		return true
	}
	ms := at.UnixMilli()
	return r.took(ms, ev.source, ev.typ) || r.took(ms+receiptSkew.Load(), ev.source, ev.typ)
}

// receiptSkew is how far (ms) a receipt time may be behind the clocks a
// route's start and changes were read from: a minute (tests set less).
var receiptSkew = func() *atomic.Int64 {
	var v atomic.Int64
	v.Store(time.Minute.Milliseconds())
	return &v
}()

// agreeSince makes the route's since no later than its consumer's
// creation: every gateway of a cluster shares the consumer, made by the
// first one configured with the route, and each records its own since
// when it restarts with the route, later. So all of them give the route
// the events received from the first one on. Recorded when lowered.
func (e *Engine) agreeSince(ctx context.Context, r *route, created time.Time) {
	ms := created.UnixMilli()
	if created.IsZero() || ms >= r.since.Load() || e.store == nil {
		return
	}
	e.sinceMu.Lock()
	defer e.sinceMu.Unlock()
	if ms >= r.since.Load() {
		return
	}
	if err := e.store.SetMeta(ctx, routeSincePrefix+r.cfg.Name, strconv.FormatInt(ms, 10)); err != nil {
		e.log.Warn("cannot record when the route's consumer was made; its since stays as it was", "route", r.cfg.Name, "err", err)
		return
	}
	e.log.Info("route taken since its consumer was made, by another gateway or before this store", "route", r.cfg.Name,
		"since", created.UTC().Format(time.RFC3339Nano))
	r.since.Store(ms)
}

// Finished reports whether every route that takes an event under the
// current configuration has finished with it (ev.Terminal holds the
// routes whose delivery succeeded or is dead), and no configured route's
// delivery of it is still open (ev.Open). A route configured after the
// event was received, or whose sources or events did not take it then,
// with no delivery of it, is not waited for.
// Retention keeps events that are not finished.
func (e *Engine) Finished(ev *store.OldEvent) bool {
	for name := range ev.Open {
		if e.byName[name] != nil {
			return false
		}
	}
	received := ev.ReceivedAt.UnixMilli()
	for _, r := range e.routes {
		if r.matches(ev.Source, ev.Type) && !ev.Terminal[r.cfg.Name] && r.took(received, ev.Source, ev.Type) {
			return false
		}
	}
	return true
}
