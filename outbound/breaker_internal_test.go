package outbound

import (
	"testing"
	"time"
)

// waitAllowed polls until b lets a round run (the cool-down is over).
func waitAllowed(t *testing.T, b *breaker) ticket {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if tk, ok, _ := b.allow(time.Now()); ok {
			return tk
		}
		if time.Now().After(deadline) {
			t.Fatalf("no probe allowed: %+v", b.status(time.Now()))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fail runs n rounds that fail.
func fail(t *testing.T, b *breaker, n int) {
	t.Helper()
	for i := range n {
		tk, ok, _ := b.allow(time.Now())
		if !ok {
			t.Fatalf("round %d not allowed: %+v", i+1, b.status(time.Now()))
		}
		b.record(tk, unhealthy, time.Now())
	}
}

// The documented breaker: breaker_threshold failed rounds in a row pause
// the route for breaker_cooldown, then one round probes; failure pauses
// it again, success resumes it. A round cut short says nothing but ends
// its probe. An operator's pause holds until resume, which also closes
// an open breaker.
func TestBreaker(t *testing.T) {
	t.Parallel()
	const cooldown = 50 * time.Millisecond
	b := newBreaker(3, cooldown)

	fail(t, b, 2)
	tk, _, _ := b.allow(time.Now())
	b.record(tk, healthy, time.Now()) // a success ends the run
	fail(t, b, 2)
	if st := b.status(time.Now()); st.State != RouteActive || st.ConsecutiveFailures != 2 {
		t.Fatalf("below the threshold: %+v", st)
	}
	fail(t, b, 1)
	now := time.Now()
	st := b.status(now)
	if st.State != RouteOpen || st.ConsecutiveFailures != 3 || st.OpenUntil.IsZero() || st.LastFailure.IsZero() {
		t.Fatalf("at the threshold: %+v, want open", st)
	}
	if _, ok, wait := b.allow(now); ok || wait <= 0 || wait > cooldown {
		t.Fatalf("open: allow = %v, wait %v; want a wait within the cool-down", ok, wait)
	}

	probe := waitAllowed(t, b)
	if _, ok, wait := b.allow(time.Now()); ok || wait != time.Second {
		t.Fatalf("a second round during the probe: %v, %v; want a 1s wait", ok, wait)
	}
	if st := b.status(time.Now()); st.State != RouteProbing {
		t.Fatalf("during the probe: %+v", st)
	}
	b.record(probe, noWord, time.Now()) // cut short: another probe may run
	probe = waitAllowed(t, b)
	b.record(probe, unhealthy, time.Now())
	if st := b.status(time.Now()); st.State != RouteOpen || st.ConsecutiveFailures != 4 {
		t.Fatalf("after a failed probe: %+v, want open again", st)
	}
	probe = waitAllowed(t, b)
	b.record(probe, healthy, time.Now())
	if st := b.status(time.Now()); st.State != RouteActive || st.ConsecutiveFailures != 0 || !st.OpenUntil.IsZero() || st.LastSuccess.IsZero() {
		t.Fatalf("after a good probe: %+v, want active", st)
	}
	fail(t, b, 2) // the run starts again from 0
	if st := b.status(time.Now()); st.State != RouteActive {
		t.Fatalf("two failures after closing: %+v", st)
	}

	b.setManual(true)
	if _, ok, wait := b.allow(time.Now()); ok || wait != 5*time.Second {
		t.Fatalf("paused: %v, %v", ok, wait)
	}
	if st := b.status(time.Now()); st.State != RoutePaused {
		t.Fatalf("paused: %+v", st)
	}
	b.setManual(false)
	fail(t, b, 3)
	if st := b.status(time.Now()); st.State != RouteOpen {
		t.Fatalf("%+v, want open", st)
	}
	b.setManual(false) // resume closes an open breaker
	if st := b.status(time.Now()); st.State != RouteActive || st.ConsecutiveFailures != 0 {
		t.Fatalf("resumed: %+v, want active", st)
	}
	fail(t, b, 1)
}

// Threshold 0: no breaker.
func TestBreakerDisabled(t *testing.T) {
	t.Parallel()
	b := newBreaker(0, time.Minute)
	fail(t, b, 100)
	if st := b.status(time.Now()); st.State != RouteActive || st.ConsecutiveFailures != 100 {
		t.Fatalf("%+v", st)
	}
}
