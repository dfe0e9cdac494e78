package outbound

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Route states, as GET /v1/routes and /readyz show them.
const (
	RouteActive  = "active"  // delivering
	RouteOpen    = "open"    // breaker open: paused after a run of failures
	RouteProbing = "probing" // cool-down over: one delivery probes the downstream
	RoutePaused  = "paused"  // paused by an operator
)

// breaker pauses a route after a run of failed rounds, for a cool-down,
// then lets one delivery probe the downstream: success closes it, failure
// opens it again. Operators may pause and resume a route by hand.
type breaker struct {
	threshold int // 0: never opens on its own
	cooldown  time.Duration

	mu          sync.Mutex
	failures    int // consecutive failed rounds
	open        bool
	openUntil   time.Time
	probing     bool // a probe round is running
	manual      bool
	lastSuccess time.Time
	lastFailure time.Time
}

func newBreaker(threshold int, cooldown time.Duration) *breaker {
	return &breaker{threshold: threshold, cooldown: cooldown}
}

// ticket is a round allow let run, to give back to record.
type ticket struct{}

// allow says whether a round may run now; if not, how long to wait.
func (b *breaker) allow(now time.Time) (ticket, bool, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.manual:
		return ticket{}, false, 5 * time.Second
	case !b.open:
		return ticket{}, true, 0
	case now.Before(b.openUntil):
		return ticket{}, false, b.openUntil.Sub(now)
	case b.probing:
		return ticket{}, false, time.Second
	}
	b.probing = true
	return ticket{}, true, 0
}

// record takes the outcome of a round that allow let run. noWord (the
// round was cut short) only ends a probe.
func (b *breaker) record(_ ticket, h health, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	wasProbe := b.probing
	b.probing = false
	if h == noWord {
		return
	}
	if h == healthy {
		b.failures, b.open, b.lastSuccess = 0, false, now
		return
	}
	b.failures++
	b.lastFailure = now
	if wasProbe || (b.threshold > 0 && b.failures >= b.threshold) {
		b.open, b.openUntil = true, now.Add(b.cooldown)
	}
}

func (b *breaker) state(now time.Time) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.manual:
		return RoutePaused
	case !b.open:
		return RouteActive
	case b.probing || !now.Before(b.openUntil):
		return RouteProbing
	}
	return RouteOpen
}

// status is how the breaker stands (RouteStatus without name and backlog).
func (b *breaker) status(now time.Time) RouteStatus {
	b.mu.Lock()
	st := RouteStatus{ConsecutiveFailures: b.failures, LastSuccess: b.lastSuccess, LastFailure: b.lastFailure}
	if b.open {
		st.OpenUntil = b.openUntil
	}
	b.mu.Unlock()
	st.State = b.state(now)
	return st
}

// setManual pauses the route, or resumes it and closes an open breaker.
func (b *breaker) setManual(paused bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.manual = paused
	if !paused {
		b.open, b.failures = false, 0
	}
}

// RouteStatus is how a route stands.
type RouteStatus struct {
	Name                string    `json:"name"`
	State               string    `json:"state"`
	Backlog             uint64    `json:"backlog"` // messages not yet delivered or acknowledged
	ConsecutiveFailures int       `json:"consecutive_failures"`
	LastSuccess         time.Time `json:"last_success,omitzero"`
	LastFailure         time.Time `json:"last_failure,omitzero"`
	OpenUntil           time.Time `json:"open_until,omitzero"`
}

// ErrRouteNotFound is returned for a route name that is not configured.
var ErrRouteNotFound = errors.New("no such route")

// Routes reports every route's state and backlog (the backlog is 0 when
// JetStream does not answer).
func (e *Engine) Routes(ctx context.Context) []RouteStatus {
	now := time.Now()
	out := make([]RouteStatus, 0, len(e.routes))
	for _, r := range e.routes {
		st := r.breaker.status(now)
		st.Name = r.cfg.Name
		if c, err := e.broker.JetStream().Consumer(ctx, e.broker.Stream(), r.consumer); err == nil {
			if info, err := c.Info(ctx); err == nil {
				st.Backlog = info.NumPending + uint64(info.NumAckPending)
			}
		}
		out = append(out, st)
	}
	return out
}

// Pause stops deliveries of a route until Resume; rounds in flight finish.
func (e *Engine) Pause(name string) error { return e.setManual(name, true) }

// Resume undoes Pause, and closes an open breaker: deliveries start now.
func (e *Engine) Resume(name string) error { return e.setManual(name, false) }

func (e *Engine) setManual(name string, paused bool) error {
	r := e.byName[name]
	if r == nil {
		return fmt.Errorf("%w: %q", ErrRouteNotFound, name)
	}
	r.breaker.setManual(paused)
	e.log.Info("route "+map[bool]string{true: "paused", false: "resumed"}[paused]+" by operator", "route", name)
	return nil
}
