package faults

import (
	"fmt"
	"testing"
	"time"
)

// Scenario 1: SIGKILL at random moments during intake and delivery, several
// cycles, restarting each time. Every event the provider got a 2xx for
// reaches every matching route, under one Idempotency-Key, and is in the
// stream exactly once.
func TestKillDuringIntakeAndDelivery(t *testing.T) {
	t.Parallel()
	s := newScenario(t, nil)
	const cycles, perCycle = 4, 100
	var batches [][]*event
	var all []*event
	for c := range cycles {
		b := s.newEvents(fmt.Sprintf("k%d", c), perCycle, 0)
		batches = append(batches, b)
		all = append(all, b...)
	}
	s.ds.setLatency(30 * time.Millisecond)   // keeps deliveries in flight
	s.provider.start(8, 60*time.Millisecond) // intake of a batch takes about half a second
	s.forger.run(all)
	for c := range cycles {
		s.start()
		s.provider.add(batches[c]...)
		at := s.rng.between(50*time.Millisecond, 1200*time.Millisecond)
		time.Sleep(at) // the random kill moment
		s.kill()
		t.Logf("cycle %d: SIGKILL %s after start; %d sends pending, %d downstream requests so far",
			c, at, s.provider.pending.Load(), s.ds.count())
	}
	s.start()
	s.verify(verifyOpts{streamOnce: true})
}
