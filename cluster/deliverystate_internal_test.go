package cluster

import (
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/store"
)

// The compare-and-set decisions: when a round may be claimed, and what a
// round's outcome writes over its claim.
func TestClaimDecisions(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_000_000)
	for _, c := range []struct {
		name  string
		cur   record
		found bool
		want  bool
	}{
		{"no entry: created", record{}, false, true},
		{"no lease", record{State: store.StateRetrying, Attempts: 3}, true, true},
		{"another's running lease", record{Owner: "b", Lease: now.UnixMilli() + 1}, true, false},
		{"another's lease ended", record{Owner: "b", Lease: now.UnixMilli()}, true, true},
		{"this owner's lease left by a failed release", record{Owner: "a", Lease: now.UnixMilli() + 60_000}, true, true},
		{"terminal without lease: claimable, admit reads it", record{State: store.StateDead}, true, true},
	} {
		if got := claimable(c.cur, c.found, "a", now); got != c.want {
			t.Errorf("%s: claimable = %v, want %v", c.name, got, c.want)
		}
	}

	claimed := record{State: store.StateRetrying, Attempts: 3, Rounds: 1, Next: 5, Owner: "a", Lease: 99}
	next := time.UnixMilli(2_000_000)
	got := after(claimed, &store.Delivery{State: store.StateRetrying, Rounds: 2, NextAttemptAt: next, LastStatus: 500}, 3)
	want := record{State: store.StateRetrying, Attempts: 6, Rounds: 2, Next: next.UnixMilli(), Status: 500}
	if got != want {
		t.Errorf("after a failed round: %+v, want %+v (attempts of the cluster, the lease cleared)", got, want)
	}
	got = after(claimed, &store.Delivery{State: store.StateSucceeded, Rounds: 1, LastStatus: 204}, 1)
	if want := (record{State: store.StateSucceeded, Attempts: 4, Rounds: 1, Status: 204}); got != want {
		t.Errorf("after a success: %+v, want %+v", got, want)
	}
	if st := got.status(7); st.ID != 7 || !st.Terminal() || st.Attempts != 4 || !st.NextAttemptAt.IsZero() {
		t.Errorf("status of a success: %+v", st)
	}
}

// A round's lease covers its longest run: every attempt timing out, with
// the longest wait between them.
func TestLeaseFor(t *testing.T) {
	t.Parallel()
	if got, want := LeaseFor(outbound.Route{}), 15*time.Second; got != want {
		t.Errorf("defaults (no retries): %s, want %s", got, want)
	}
	if got, want := LeaseFor(outbound.Route{Timeout: 15 * time.Second, Retries: 2, RetryWaitMax: 30 * time.Second}), 105*time.Second; got != want {
		t.Errorf("15s, 2 retries, 30s waits: %s, want %s", got, want)
	}
	s := NewDeliveryState(func() natsjs.JetStream { return nil }, nil, DeliveryStateConfig{TTL: time.Hour,
		Routes: []outbound.Route{{Name: "r", Timeout: time.Second, Retries: 1, RetryWaitMax: time.Second}}}, nil)
	if got, want := s.leaseOf("r"), 3*time.Second+DefaultLeaseMargin; got != want {
		t.Errorf("lease of r: %s, want %s", got, want)
	}
	if got, want := s.cfg.TTL, 24*time.Hour; got != want {
		t.Errorf("TTL: %s, want %s (twice the default schedule's longest step)", got, want)
	}
}
