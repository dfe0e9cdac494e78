package faults

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// Scenario 14: the NATS node leading the events stream is SIGKILLed under
// load (one gateway, cluster mode, 3 nats-server processes). The stream,
// and whatever else that node led, elect new leaders after nats-server's
// election timeout (4–9 s); delivery resumes after the last of those
// elections, and the test logs how long after (README, What a NATS
// node's loss costs).
func TestClusterStreamLeaderKilled(t *testing.T) {
	t.Parallel()
	nn := startNATSNodes(t, 3)
	cs := newClusterScenarioOn(t, nn.url(), nil, nn.leaderOf, 1)
	s := cs.s
	cs.start(0)
	cs.waitStreamLeader()

	nc, err := nats.Connect(nn.url())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var mu sync.Mutex
	var elected []time.Time
	for _, subj := range []string{"$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.>", "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.>"} {
		if _, err := nc.Subscribe(subj, func(*nats.Msg) {
			mu.Lock()
			elected = append(elected, time.Now())
			mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
	}

	// An event every 25ms, each sent until it is accepted.
	evs := s.newEvents("fo", 800, 0)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	began := time.Now()
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Timeout: 15 * time.Second}
			for i := w; i < len(evs); i += 4 {
				if !sleepUntil(quit, time.Until(began.Add(time.Duration(i)*25*time.Millisecond))) {
					return
				}
				for {
					a, err := post(c, "http://"+cs.cfgs[0].Listen+"/webhooks/stripe", evs[i].Body, signed(evs[i].Body, stripeSecret, time.Time{}))
					if err == nil && a.ok() {
						break
					}
					if !sleepUntil(quit, 50*time.Millisecond) {
						return
					}
				}
			}
		}()
	}
	defer func() { close(quit); wg.Wait() }()

	gatewaytest.WaitFor(t, "deliveries under way", 30*time.Second, func() (bool, string) {
		return s.ds.count() > 50, fmt.Sprint(s.ds.count())
	})
	n := nn.leaderOf(streamName)
	if n < 0 {
		t.Fatal("no node leads the events stream")
	}
	killed := time.Now()
	nn.kill(n)
	t.Logf("SIGKILL n%d, the events stream's leader", n+1)

	// Resumed: a request for an event sent after the kill.
	sentAfter := map[string]bool{}
	var resumed time.Time
	gatewaytest.WaitFor(t, "delivery to resume", 60*time.Second, func() (bool, string) {
		for _, r := range s.ds.snapshot() {
			if r.At.After(killed) && sentAfter[r.EventID] {
				resumed = r.At
				return true, ""
			}
		}
		for i, ev := range evs {
			if began.Add(time.Duration(i) * 25 * time.Millisecond).After(killed.Add(100 * time.Millisecond)) {
				sentAfter[ev.ID] = true
			}
		}
		return false, "none yet"
	})
	mu.Lock()
	var last time.Time
	for _, at := range elected {
		if at.After(killed) && at.Before(resumed) {
			last = at
		}
	}
	mu.Unlock()
	if last.IsZero() {
		t.Fatalf("delivery resumed %s after the SIGKILL, before any leader election", resumed.Sub(killed).Round(time.Millisecond))
	}
	t.Logf("delivery resumed %s after the SIGKILL, %s after the last leader election before it",
		resumed.Sub(killed).Round(time.Millisecond), resumed.Sub(last).Round(time.Millisecond))
	// How soon after the election is measured, not asserted (it follows
	// the machine's load): 10–120 ms on a quiet 2-core machine, 0.7–3.8 s
	// when each request made without a leader waited out its 5 s timeout.
	// That the wait ends at an election is jetstream's
	// TestUntilElectedEndsAtElection.
	nn.start(n)
}
