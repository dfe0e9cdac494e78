package outbound

import (
	"context"
	"fmt"
	"time"
)

// pauseKey is the store meta key that holds "1" while an operator has a
// route paused: a pause outlives a restart until Resume. In cluster mode
// it is this gateway's copy of the cluster's pause (Pauses), used when
// NATS does not answer at start.
func pauseKey(route string) string { return "route_paused:" + route }

// pauseWriteTimeout bounds the store write of a pause or resume.
const pauseWriteTimeout = 10 * time.Second

// Pauses shares operators' pauses between gateways (package cluster).
type Pauses interface {
	// SetPause records that route is paused (or resumed) for every
	// gateway, and applies it here through ApplyPause before it returns.
	SetPause(ctx context.Context, route string, paused bool) error
}

// setClusterPause is Pause or Resume in cluster mode: recorded in the
// cluster, which applies it here and on every gateway.
func (e *Engine) setClusterPause(name string, paused bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), pauseWriteTimeout)
	defer cancel()
	if err := e.cfg.Pauses.SetPause(ctx, name, paused); err != nil {
		return fmt.Errorf("route %s: record pause in the cluster: %w", name, err)
	}
	return nil
}

// ApplyPause pauses or resumes a route as the cluster records it (gateway
// is where an operator asked), and keeps it in this gateway's store; a
// route not configured here is ignored. A resume closes an open breaker,
// as Resume does. The route is paused or resumed
// even when the store's copy cannot be written (the error says so).
func (e *Engine) ApplyPause(name string, paused bool, gateway string) error {
	r := e.byName[name]
	if r == nil {
		return nil
	}
	e.pauseMu.Lock()
	defer e.pauseMu.Unlock()
	err := e.keepPause(name, paused)
	switch st := r.breaker.state(); {
	case paused && st == RoutePaused, !paused && st == RouteActive:
		return err
	}
	r.breaker.setManual(paused)
	e.log.Info("route "+map[bool]string{true: "paused", false: "resumed"}[paused]+" by operator (every gateway)",
		"route", name, "gateway", gateway)
	return err
}

// keepPause writes the store's copy of a route's pause, unless it holds
// it already.
func (e *Engine) keepPause(route string, paused bool) error {
	if e.store == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), pauseWriteTimeout)
	defer cancel()
	v, err := e.store.Meta(ctx, pauseKey(route))
	if err == nil && (v == "1") == paused {
		return nil
	}
	return e.persistPause(route, paused)
}

// StoredPauses are the configured routes this gateway's store records
// paused.
func (e *Engine) StoredPauses(ctx context.Context) ([]string, error) {
	if e.store == nil {
		return nil, nil
	}
	var out []string
	for _, r := range e.routes {
		v, err := e.store.Meta(ctx, pauseKey(r.cfg.Name))
		if err != nil {
			return nil, fmt.Errorf("route %s: read pause: %w", r.cfg.Name, err)
		}
		if v == "1" {
			out = append(out, r.cfg.Name)
		}
	}
	return out, nil
}

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

// loadPauses pauses the routes an operator left paused (in cluster mode,
// those the cluster did not apply already).
func (e *Engine) loadPauses(ctx context.Context) error {
	if e.store == nil {
		return nil
	}
	for _, r := range e.routes {
		if err := e.loadPause(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// loadPause pauses r if the store's copy says so.
func (e *Engine) loadPause(ctx context.Context, r *route) error {
	e.pauseMu.Lock()
	defer e.pauseMu.Unlock()
	if r.breaker.state() == RoutePaused {
		return nil
	}
	v, err := e.store.Meta(ctx, pauseKey(r.cfg.Name))
	if err != nil {
		return fmt.Errorf("route %s: read pause: %w", r.cfg.Name, err)
	}
	if v == "1" {
		r.breaker.setManual(true)
		e.log.Info("route paused by an operator before the restart: stays paused until resumed", "route", r.cfg.Name)
	}
	return nil
}
