package outbound

import (
	"context"
	"fmt"
	"time"
)

// pauseKey is the store meta key that holds "1" while an operator has a
// route paused: a pause outlives a restart until Resume. It is this
// gateway's store, so in cluster mode a pause is per gateway.
func pauseKey(route string) string { return "route_paused:" + route }

// pauseWriteTimeout bounds the store write of a pause or resume.
const pauseWriteTimeout = 10 * time.Second

// persistPause records that route is paused (or no longer is).
func (e *Engine) persistPause(route string, paused bool) error {
	if e.store == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), pauseWriteTimeout)
	defer cancel()
	v := ""
	if paused {
		v = "1"
	}
	if err := e.store.SetMeta(ctx, pauseKey(route), v); err != nil {
		return fmt.Errorf("route %s: record pause: %w", route, err)
	}
	return nil
}

// loadPauses pauses the routes an operator left paused.
func (e *Engine) loadPauses(ctx context.Context) error {
	if e.store == nil {
		return nil
	}
	for _, r := range e.routes {
		v, err := e.store.Meta(ctx, pauseKey(r.cfg.Name))
		if err != nil {
			return fmt.Errorf("route %s: read pause: %w", r.cfg.Name, err)
		}
		if v == "1" {
			r.breaker.setManual(true)
			e.log.Info("route paused by an operator before the restart: stays paused until resumed", "route", r.cfg.Name)
		}
	}
	return nil
}
