package faults

import (
	"strconv"
	"testing"
	"time"
)

// Scenario 2: the downstream fails (500), hangs past the route timeout,
// answers 429 with Retry-After, resets connections, answers a random mix,
// then recovers, while events keep arriving. Nothing is lost or doubled,
// and a Retry-After is honoured between the quick retries of a round.
func TestDownstreamFaults(t *testing.T) {
	t.Parallel()
	s := newScenario(t, func(c *gwConfig) { c.RouteTimeout = 500 * time.Millisecond })
	phases := []mode{modeOK, modeFail, modeHang, modeTooMany, modeReset, modeFlaky, modeOK}
	const perPhase = 40
	evs := s.newEvents("d", perPhase*len(phases), 0)
	s.start()
	s.provider.start(4, 40*time.Millisecond)
	s.forger.run(evs)
	for i, m := range phases {
		s.ds.set(m)
		s.provider.add(evs[i*perPhase : (i+1)*perPhase]...)
		d := s.rng.between(700*time.Millisecond, 1500*time.Millisecond)
		t.Logf("downstream %s for %s", m, d)
		time.Sleep(d) // the phase's length
	}
	s.verify(verifyOpts{streamOnce: true, keepRunning: true})

	outcomes := map[string]int{}
	for _, r := range s.ds.snapshot() {
		k := r.Outcome
		if r.Status != 0 {
			k = strconv.Itoa(r.Status)
		}
		outcomes[k]++
	}
	t.Logf("downstream answers: %v", outcomes)
	for _, k := range []string{"500", "429", "hung", "reset"} {
		if outcomes[k] == 0 {
			t.Errorf("the downstream never answered %s: the scenario did not exercise it", k)
		}
	}
	checkRetryAfter(t, s.ds.snapshot(), time.Second)
	s.stopClean()
	s.checkDB()
}

// checkRetryAfter checks that after a 429 with Retry-After: 1 to the first
// attempt of a round (odd attempt numbers: routes make two attempts per
// round), the second attempt came no sooner than want (Retry-After capped
// by retry_wait_max).
func checkRetryAfter(t *testing.T, reqs []request, want time.Duration) {
	t.Helper()
	type at struct {
		key     string
		attempt int
	}
	first := map[at]time.Time{}
	for _, r := range reqs {
		n, err := strconv.Atoi(r.Attempt)
		if err != nil {
			t.Errorf("request for %s without a valid X-Hookgate-Attempt: %q", r.EventID, r.Attempt)
			continue
		}
		k := at{r.Key, n}
		if old, ok := first[k]; !ok || r.At.Before(old) {
			first[k] = r.At
		}
	}
	checked, early := 0, 0
	for _, r := range reqs {
		n, _ := strconv.Atoi(r.Attempt)
		if r.Status != 429 || n%2 == 0 {
			continue
		}
		next, ok := first[at{r.Key, n + 1}]
		if !ok {
			continue
		}
		checked++
		if gap := next.Sub(r.At); gap < want-100*time.Millisecond {
			if early++; early <= 5 {
				t.Errorf("event %s: attempt %d came %s after a 429 with Retry-After: 1, want >= %s", r.EventID, n+1, gap, want)
			}
		}
	}
	t.Logf("Retry-After: %d retries after a 429 checked, %d too early", checked, early)
}
