package faults

import (
	"sync"
	"testing"
	"time"
)

// Scenario 6: every event sent as a burst of 2 to 6 simultaneous copies
// over different connections, while the gateway is SIGKILLed and
// restarted. No event is ever answered "accepted" twice, each is in the
// stream once and reaches each matching route under one key.
func TestConcurrentDuplicatesDuringRestarts(t *testing.T) {
	t.Parallel()
	s := newScenario(t, nil)
	evs := s.newEvents("dup", 200, 0)
	s.ds.setLatency(20 * time.Millisecond)
	s.provider.start(4, 0) // for the deliberate repeats
	s.forger.run(evs)

	feedRNG := newRNG(s.seed, 10) // its own stream: the kill moments stay those of the seed
	quit := make(chan struct{})
	var feeder sync.WaitGroup
	feeder.Add(1)
	go func() {
		defer feeder.Done()
		for _, ev := range evs {
			s.provider.burst(ev, 2+feedRNG.intn(5))
			if !sleepUntil(quit, feedRNG.between(5*time.Millisecond, 25*time.Millisecond)) {
				return
			}
		}
	}()
	t.Cleanup(func() { close(quit); feeder.Wait() })

	for c := range 3 {
		s.start()
		at := s.rng.between(200*time.Millisecond, 900*time.Millisecond)
		time.Sleep(at) // the random kill moment
		s.kill()
		t.Logf("cycle %d: SIGKILL %s after start; %d sends pending", c, at, s.provider.pending.Load())
	}
	s.start()
	feeder.Wait()
	s.verify(verifyOpts{streamOnce: true})

	s.provider.mu.Lock()
	unseen := 0
	for _, ev := range evs {
		if s.provider.accepted[ev.ID] == 0 {
			unseen++ // its "accepted" answer was lost with a killed gateway
		}
	}
	s.provider.mu.Unlock()
	t.Logf("%d of %d events never had their \"accepted\" answer seen (cut by a kill)", unseen, len(evs))
}
