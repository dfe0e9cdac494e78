package outbound

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
)

// Route states, as GET /v1/routes and /readyz/delivery show them.
const (
	RouteActive  = "active"  // delivering
	RouteOpen    = "open"    // breaker open: paused after a run of failures
	RouteProbing = "probing" // cool-down over: one delivery probes the downstream
	RoutePaused  = "paused"  // paused by an operator
)

// breaker pauses a route after a run of failed rounds, for a cool-down,
// then lets one delivery probe the downstream: success closes it, failure
// opens it again. That is sony/gobreaker's two-step breaker (one request
// when half-open; a round cut short is excluded, which ends a probe
// without a verdict); around it, operators may pause and resume a route by
// hand, and the counts GET /v1/routes shows are kept.
type breaker struct {
	threshold int // 0: never opens on its own
	cooldown  time.Duration
	alerts    Alerts // nil: none
	name      string // the route's, for alerts

	mu          sync.Mutex // never held while calling cb: cb calls opened under its own lock
	cb          *gobreaker.TwoStepCircuitBreaker[struct{}]
	manual      bool
	failures    int // consecutive failed rounds
	openUntil   time.Time
	lastSuccess time.Time
	lastFailure time.Time
}

func newBreaker(threshold int, cooldown time.Duration) *breaker {
	b := &breaker{threshold: threshold, cooldown: cooldown}
	b.cb = b.newCircuit()
	return b
}

// errFailed and errNoWord are what a round tells the circuit.
var (
	errFailed = errors.New("round failed")
	errNoWord = errors.New("round cut short")
)

func (b *breaker) newCircuit() *gobreaker.TwoStepCircuitBreaker[struct{}] {
	return gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		MaxRequests: 1, // one probe
		Timeout:     b.cooldown,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return b.threshold > 0 && c.ConsecutiveFailures >= uint32(b.threshold)
		},
		IsExcluded: func(err error) bool { return errors.Is(err, errNoWord) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			switch {
			case to == gobreaker.StateOpen:
				until := time.Now().Add(b.cooldown)
				b.opened(until)
				if from == gobreaker.StateClosed && b.alerts != nil {
					b.alerts.BreakerOpened(b.name, b.threshold, until) // a failed probe is no news
				}
			case to == gobreaker.StateClosed && b.alerts != nil:
				b.alerts.BreakerClosed(b.name, false)
			}
		},
	})
}

func (b *breaker) opened(until time.Time) {
	b.mu.Lock()
	b.openUntil = until
	b.mu.Unlock()
}

// ticket is a round allow let run, to give back to record.
type ticket struct{ done func(error) }

// allow says whether a round may run now; if not, how long to wait.
func (b *breaker) allow(now time.Time) (ticket, bool, time.Duration) {
	b.mu.Lock()
	manual, cb := b.manual, b.cb
	b.mu.Unlock()
	if manual {
		return ticket{}, false, pausedRetry
	}
	done, err := cb.Allow()
	switch {
	case err == nil:
		return ticket{done}, true, 0
	case errors.Is(err, gobreaker.ErrOpenState):
		b.mu.Lock()
		defer b.mu.Unlock()
		return ticket{}, false, max(b.openUntil.Sub(now), time.Millisecond)
	}
	return ticket{}, false, time.Second // a probe is running
}

// record takes the outcome of a round that allow let run. noWord (the
// round was cut short) only ends a probe.
func (b *breaker) record(t ticket, h health, now time.Time) {
	err := errNoWord
	b.mu.Lock()
	switch h {
	case healthy:
		b.failures, b.lastSuccess, err = 0, now, nil
	case unhealthy:
		b.failures++
		b.lastFailure, err = now, errFailed
	}
	b.mu.Unlock()
	if t.done != nil {
		t.done(err)
	}
}

// paused reports whether an operator paused the route.
func (b *breaker) paused() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.manual
}

func (b *breaker) state() string {
	b.mu.Lock()
	manual, cb := b.manual, b.cb
	b.mu.Unlock()
	if manual {
		return RoutePaused
	}
	switch cb.State() {
	case gobreaker.StateOpen:
		return RouteOpen
	case gobreaker.StateHalfOpen:
		return RouteProbing
	}
	return RouteActive
}

// status is how the breaker stands (RouteStatus without name and backlog).
func (b *breaker) status(time.Time) RouteStatus {
	st := RouteStatus{State: b.state()}
	b.mu.Lock()
	defer b.mu.Unlock()
	st.ConsecutiveFailures, st.LastSuccess, st.LastFailure = b.failures, b.lastSuccess, b.lastFailure
	if st.State == RouteOpen || st.State == RouteProbing {
		st.OpenUntil = b.openUntil
	}
	return st
}

// setManual pauses the route, or resumes it and closes an open breaker (a
// new circuit: rounds allowed by the old one no longer count).
func (b *breaker) setManual(paused bool) {
	b.mu.Lock()
	cb := b.cb
	b.mu.Unlock()
	wasOpen := !paused && cb.State() != gobreaker.StateClosed
	b.mu.Lock()
	b.manual = paused
	if !paused {
		b.cb, b.failures, b.openUntil = b.newCircuit(), 0, time.Time{}
	}
	b.mu.Unlock()
	if wasOpen && b.alerts != nil {
		b.alerts.BreakerClosed(b.name, true)
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
// JetStream does not answer): one request to JetStream per route.
func (e *Engine) Routes(ctx context.Context) []RouteStatus {
	out := e.RouteStates()
	for i, r := range e.routes {
		if c, err := e.broker.JetStream().Consumer(ctx, e.broker.Stream(), r.consumer); err == nil {
			info := c.CachedInfo()
			out[i].Backlog = info.NumPending + uint64(info.NumAckPending)
		}
	}
	return out
}

// RouteStates is Routes without the backlogs, asking JetStream nothing.
func (e *Engine) RouteStates() []RouteStatus {
	now := time.Now()
	out := make([]RouteStatus, 0, len(e.routes))
	for _, r := range e.routes {
		st := r.breaker.status(now)
		st.Name = r.cfg.Name
		out = append(out, st)
	}
	return out
}

// Pause stops deliveries of a route until Resume; rounds in flight finish.
// The pause is recorded in the store: it outlives a restart.
func (e *Engine) Pause(name string) error { return e.setManual(name, true) }

// Resume undoes Pause, and closes an open breaker: deliveries start now.
func (e *Engine) Resume(name string) error { return e.setManual(name, false) }

func (e *Engine) setManual(name string, paused bool) error {
	r := e.byName[name]
	if r == nil {
		return fmt.Errorf("%w: %q", ErrRouteNotFound, name)
	}
	if e.cfg.Pauses != nil {
		return e.setClusterPause(name, paused)
	}
	// The store's copy and the breaker change together: two operators at
	// once must not leave them apart (a restart would then flip it).
	e.pauseMu.Lock()
	defer e.pauseMu.Unlock()
	if err := e.persistPause(name, paused); err != nil {
		return err
	}
	r.breaker.setManual(paused)
	e.log.Info("route "+map[bool]string{true: "paused", false: "resumed"}[paused]+" by operator", "route", name)
	return nil
}
