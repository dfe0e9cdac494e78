package outbound

import (
	"errors"
	"testing"
	"time"

	"github.com/hookgate/hookgate/store"
)

// screen: a passing filter runs the round; a rejecting or failing one
// records the delivery filtered (terminal, no attempt, rounds kept, the
// failure as last error) and acks its message, whatever stood before.
func TestScreen(t *testing.T) {
	next := time.Unix(1_700_000_000, 0)
	boom := errors.New("no such key: livemode")
	for _, tc := range []struct {
		name      string
		prev      store.DeliveryStatus
		pass      bool
		err       error
		run       bool
		rounds    int
		lastError string
	}{
		{"passes, new", store.DeliveryStatus{}, true, nil, true, 0, ""},
		{"passes, retrying", store.DeliveryStatus{State: store.StateRetrying, Rounds: 2, NextAttemptAt: next}, true, nil, true, 0, ""},
		{"rejects, new", store.DeliveryStatus{}, false, nil, false, 0, ""},
		{"rejects, pending (a replay)", store.DeliveryStatus{State: store.StatePending, Attempts: 3, Rounds: 1}, false, nil, false, 1, ""},
		{"rejects, retrying (filter added since)", store.DeliveryStatus{State: store.StateRetrying, Rounds: 2, NextAttemptAt: next}, false, nil, false, 2, ""},
		{"fails, new", store.DeliveryStatus{}, false, boom, false, 0, "filter: no such key: livemode"},
		{"fails although true", store.DeliveryStatus{}, true, boom, false, 0, "filter: no such key: livemode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run, d := screen(tc.prev, tc.pass, tc.err)
			if run != tc.run {
				t.Fatalf("run = %v, want %v", run, tc.run)
			}
			if run {
				if d.record {
					t.Errorf("a passing filter records: %+v", d)
				}
				return
			}
			want := decision{record: true, outcome: outcomeFiltered, health: noWord, then: actAck,
				next: change{state: store.StateFiltered, rounds: tc.rounds, lastError: tc.lastError}}
			if d != want {
				t.Errorf("decision = %+v, want %+v", d, want)
			}
		})
	}
}
