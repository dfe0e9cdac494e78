package faults

import (
	"net"
	"testing"
	"time"
)

// Scenario 7: SIGTERM under load, twice. The gateway exits with status 0
// within shutdown_timeout, lets the deliveries in flight finish (the
// downstream never sees a request abandoned), and after a restart nothing
// is lost.
func TestGracefulShutdownUnderLoad(t *testing.T) {
	t.Parallel()
	s := newScenario(t, nil)
	const cycles, perCycle = 2, 150
	evs := s.newEvents("g", cycles*perCycle, 0)
	s.ds.setLatency(250 * time.Millisecond)  // every delivery is in flight for a while
	s.provider.start(8, 60*time.Millisecond) // intake of a batch takes about a second
	s.forger.run(evs)
	for c := range cycles {
		s.start()
		s.provider.add(evs[c*perCycle : (c+1)*perCycle]...)
		at := s.rng.between(300*time.Millisecond, 1200*time.Millisecond)
		time.Sleep(at) // the random moment of the SIGTERM
		code, took := s.stop()
		t.Logf("cycle %d: SIGTERM %s after start; exit status %d after %s; %d sends pending", c, at, code, took, s.provider.pending.Load())
		if code != 0 {
			t.Errorf("cycle %d: exit status %d after SIGTERM, want 0", c, code)
		}
		if took > s.cfg.ShutdownTimeout {
			t.Errorf("cycle %d: shutdown took %s, over shutdown_timeout %s", c, took, s.cfg.ShutdownTimeout)
		}
		if !s.logContains(s.runs, "hookgate stopped") {
			t.Errorf("cycle %d: the log does not say \"hookgate stopped\"", c)
		}
	}
	s.start()
	s.verify(verifyOpts{streamOnce: true})
	aborted := 0
	for _, r := range s.ds.snapshot() {
		if r.Outcome == "aborted" {
			aborted++
		}
	}
	if aborted > 0 {
		t.Errorf("%d downstream requests were abandoned by the gateway mid-request during a graceful shutdown", aborted)
	}

	// A graceful stop hands back what it pulled but did not start, so the
	// next run delivers it at once, not after the consumer's AckWait (30s).
	t.Run("prompt_redelivery", func(t *testing.T) {
		if s.drained > 5*time.Second {
			t.Errorf("after a graceful shutdown, the last deliveries came %s after the restart: "+
				"messages pulled but not started must be handed back at shutdown", s.drained.Round(100*time.Millisecond))
		}
	})

	// A client connection that was opened but has not sent a request yet
	// (a Go client's spare keep-alive connection, a preconnecting proxy)
	// must not hold up a graceful shutdown.
	t.Run("idle_connection", func(t *testing.T) {
		s := newScenario(t, func(c *gwConfig) { c.ShutdownTimeout = 3 * time.Second })
		s.start()
		conn, err := net.Dial("tcp", s.cfg.Listen)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		time.Sleep(100 * time.Millisecond) // let the gateway accept it
		code, took := s.stop()
		if code != 0 || took >= s.cfg.ShutdownTimeout {
			t.Errorf("with one idle client connection that never sent a request, SIGTERM took %s and exited %d "+
				"(want 0, at once)", took.Round(time.Millisecond), code)
		}
	})
}
