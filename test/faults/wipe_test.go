package faults

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// Scenario 4: the embedded JetStream store (<data_dir>/jetstream) wiped
// while the gateway is stopped, once after a SIGKILL with deliveries
// half done, once after a SIGTERM with the downstream down. The gateway
// publishes again from SQLite whatever some route had not finished, and
// every acknowledged event is delivered under its one key.
func TestJetStreamStoreWiped(t *testing.T) {
	t.Parallel()
	s := newScenario(t, nil)
	const perCycle = 120
	first, second := s.newEvents("w0", perCycle, 0), s.newEvents("w1", perCycle, 0)
	jsDir := filepath.Join(s.cfg.DataDir, "jetstream")
	wipe := func() {
		t.Helper()
		if _, err := os.Stat(filepath.Join(jsDir, "jetstream")); err != nil {
			t.Fatalf("no JetStream store to wipe: %v", err)
		}
		if err := os.RemoveAll(jsDir); err != nil {
			t.Fatal(err)
		}
	}
	s.provider.start(8, 10*time.Millisecond)
	s.forger.run(append(first, second...))

	// Cycle 1: the downstream fails a good part of the time; SIGKILL at a
	// random moment once intake is done, while deliveries are retrying.
	s.ds.set(modeFlaky)
	s.start()
	s.provider.add(first...)
	if err := s.provider.waitIdle(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(s.rng.between(100*time.Millisecond, 800*time.Millisecond)) // the random kill moment
	s.kill()
	wipe()

	// Cycle 2: the downstream is down; SIGTERM, then wipe.
	s.ds.set(modeFail)
	s.start()
	s.provider.add(second...)
	if err := s.provider.waitIdle(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(s.rng.between(100*time.Millisecond, 800*time.Millisecond))
	s.stopClean()
	wipe()
	before := len(s.ds.snapshot())
	done := map[[2]string]bool{} // (route, event) answered 2xx before the stop
	for _, r := range s.ds.snapshot() {
		if r.ok() {
			done[[2]string{r.Route, r.EventID}] = true
		}
	}

	s.ds.set(modeOK)
	s.start()
	s.verify(verifyOpts{})
	resent := 0
	for _, r := range s.ds.snapshot()[before:] {
		if done[[2]string{r.Route, r.EventID}] {
			resent++
		}
	}
	t.Logf("after the second wipe, %d requests went again to (route, event) pairs already answered 2xx (%d pairs)", resent, len(done))
}

// Scenario 9: the embedded JetStream store removed while the gateway runs,
// under load. Publishing fails, /readyz/delivery says why, and the relay creates
// the stream again: without a restart, every acknowledged event is
// delivered under its one key.
func TestJetStreamStoreRemovedWhileRunning(t *testing.T) {
	t.Parallel()
	s := newScenario(t, nil)
	first, second := s.newEvents("r0", 60, 0), s.newEvents("r1", 120, 0)
	jsDir := filepath.Join(s.cfg.DataDir, "jetstream")
	s.provider.start(6, 10*time.Millisecond)
	s.forger.run(append(first, second...))
	s.start()
	s.provider.add(first...)
	if err := s.provider.waitIdle(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	// The running server may write into a directory while it is being
	// removed ("directory not empty"): remove again until it is gone.
	gatewaytest.WaitFor(t, "the JetStream store removed", 10*time.Second, func() (bool, string) {
		if err := os.RemoveAll(jsDir); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	s.provider.add(second...)
	s.verify(verifyOpts{})
	if s.runs != 1 {
		t.Errorf("the gateway was started %d times; recovery must not need a restart", s.runs)
	}
	t.Logf("the stream was broken and created again: %v", s.logContains(1, "the events stream is broken"))
}
