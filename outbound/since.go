package outbound

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/hookgate/hookgate/store"
)

// A route added to a running installation is never given the events
// received before it: the stream dropped them once the routes before it
// acknowledged them. So retention does not wait for it on those events
// (Finished), nor does a stream made anew get them back for it (Owed):
// the store's meta key route_since:<name> holds when the
// route was first configured (unix ms). On the first start that records
// it, every configured route is taken as configured from the start.
const (
	routeSincePrefix = "route_since:"
	routesSinceKept  = "routes_since_kept"
)

// loadSince reads, or records, when each route was first configured.
func (e *Engine) loadSince(ctx context.Context) error {
	if e.store == nil {
		return nil
	}
	kept, err := e.store.Meta(ctx, routesSinceKept)
	if err != nil {
		return fmt.Errorf("read %s: %w", routesSinceKept, err)
	}
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	for _, r := range e.routes {
		v, err := e.store.Meta(ctx, routeSincePrefix+r.cfg.Name)
		if err != nil {
			return fmt.Errorf("route %s: read since: %w", r.cfg.Name, err)
		}
		if v == "" {
			v = now
			if kept == "" {
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
	}
	if kept == "" {
		return e.store.SetMeta(ctx, routesSinceKept, "1")
	}
	return nil
}

// Finished reports whether every route that takes an event under the
// current configuration has finished with it (ev.Terminal holds the
// routes whose delivery succeeded or is dead), and no configured route's
// delivery of it is still open (ev.Open). A route configured after the
// event was received, with no delivery of it, is not waited for.
// Retention keeps events that are not finished.
func (e *Engine) Finished(ev *store.OldEvent) bool {
	for name := range ev.Open {
		if e.byName[name] != nil {
			return false
		}
	}
	received := ev.ReceivedAt.UnixMilli()
	for _, r := range e.routes {
		if r.matches(ev.Source, ev.Type) && !ev.Terminal[r.cfg.Name] && received >= r.since.Load() {
			return false
		}
	}
	return true
}
