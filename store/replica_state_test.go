package store

import (
	"context"
	"encoding/json"
	"testing"
)

func stateRec(state string, version uint64, attempts int) *StateRecord {
	return &StateRecord{Origin: "gw2", Route: "billing", Source: "stripe", EventID: "evt_1", EventType: "invoice.paid",
		IdempotencyKey: "hg_k", State: state, Attempts: attempts, Rounds: 1, CreatedAt: 1000, UpdatedAt: 3000 + int64(version),
		Version: version}
}

// A state record (an operator's reset on another gateway) is applied in
// its delivery's order, by version, as rounds are: an older one never
// writes over a newer round's outcome, a newer one does, and a round
// older than it changes nothing but its attempts; applied before the
// delivery is known here, it makes it.
func TestApplyStateRecords(t *testing.T) {
	ctx := context.Background()
	state := func(s *Store) *Delivery {
		t.Helper()
		d, err := s.Delivery(ctx, "billing", "stripe", "evt_1")
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	s := openTest(t, "")
	steps := []struct {
		name  string
		rec   Record
		state string
		n     int // attempts
	}{
		{"a round", Record{Round: roundRec(StateDead, 10, 1, 410)}, StateDead, 1},
		{"an older reset", Record{State: stateRec(StatePending, 8, 1)}, StateDead, 1},
		{"a newer reset", Record{State: stateRec(StatePending, 12, 1)}, StatePending, 1},
		{"a round older than the reset", Record{Round: roundRec(StateDead, 11, 2, 410)}, StatePending, 1},
		{"the reset again", Record{State: stateRec(StatePending, 12, 1)}, StatePending, 1},
		{"the operator's round", Record{Round: roundRec(StateSucceeded, 14, 3, 200)}, StateSucceeded, 3},
	}
	for i, st := range steps {
		if err := s.ApplyRecords(ctx, []Record{st.rec}, uint64(i+1)); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if i == 0 {
			if err := s.ApplyRecords(ctx, []Record{{Event: eventRec()}}, 100); err != nil {
				t.Fatal(err)
			}
		}
		if d := state(s); d.State != st.state || d.Attempts != st.n {
			t.Fatalf("after %s: %s, %d attempts; want %s, %d", st.name, d.State, d.Attempts, st.state, st.n)
		}
	}

	// Before its delivery and its event are known here.
	other := openTest(t, "")
	if err := other.ApplyRecords(ctx, []Record{{State: stateRec(StatePending, 5, 2)}, {Event: eventRec()}}, 2); err != nil {
		t.Fatal(err)
	}
	if d := state(other); d.State != StatePending || d.Attempts != 2 || d.IdempotencyKey != "hg_k" || d.EventType != "invoice.paid" {
		t.Fatalf("a reset applied first: %+v", d)
	}
}

// An operator's reset in cluster mode is recorded with the local reset,
// in its transaction: the row takes the reset's version (an older round
// applied later does not write over it), and the record, completed from
// the row, waits in records_out; applied on another store, it shows the
// delivery pending there. A put-back state is recorded the same way.
func TestResetRecordedWithLocalReset(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []string{"retry", "replay"} {
		t.Run(tc, func(t *testing.T) {
			s := openTest(t, "")
			ev := testEvent("evt_1")
			if _, err := s.Claim(ctx, ev); err != nil {
				t.Fatal(err)
			}
			d := &Delivery{EventSeq: ev.Seq, Route: "billing", Source: "stripe", EventID: "evt_1", IdempotencyKey: "hg_k",
				State: StateDead, Rounds: 1, LastStatus: 410}
			if err := s.RecordClusterRound(ctx, d, nil, ClusterRound{Origin: "gw1", FirstAttempt: 1, Attempts: 1, Version: 3}); err != nil {
				t.Fatal(err)
			}
			out, _ := s.RecordsOut(ctx, 10)
			ids := make([]int64, len(out))
			for i, o := range out {
				ids[i] = o.ID
			}
			if err := s.DeleteRecordsOut(ctx, ids); err != nil {
				t.Fatal(err)
			}
			rec := &StateRecord{Origin: "gw1", Route: "billing", Source: "stripe", EventID: "evt_1", Attempts: 1, Rounds: 1,
				LastStatus: 410, Version: 6}
			if tc == "retry" {
				if ok, err := s.SetClusterDeliveryState(ctx, d.ID, StatePending, rec); err != nil || !ok {
					t.Fatalf("reset: %v, %v", ok, err)
				}
			} else if _, err := s.ResetDelivery(ctx, &Delivery{EventSeq: ev.Seq, Route: "billing", Source: "stripe",
				EventID: "evt_1", IdempotencyKey: "hg_k"}, rec); err != nil {
				t.Fatal(err)
			}
			// The round the reset was written over, applied late here.
			if err := s.ApplyRecords(ctx, []Record{{Round: roundRec(StateDead, 5, 1, 410)}}, 1); err != nil {
				t.Fatal(err)
			}
			if got, _ := s.Delivery(ctx, "billing", "stripe", "evt_1"); got.State != StatePending {
				t.Fatalf("an older round applied after the reset: %s, want pending", got.State)
			}
			out, err := s.RecordsOut(ctx, 10)
			if err != nil || len(out) != 1 || out[0].Subject != StateRecordSubject || out[0].MsgID != "state:hg_k:6" {
				t.Fatalf("records out %+v, %v; want the reset's", out, err)
			}
			var sr StateRecord
			if err := json.Unmarshal(out[0].Data, &sr); err != nil {
				t.Fatal(err)
			}
			if sr.State != StatePending || sr.IdempotencyKey != "hg_k" || sr.Version != 6 || sr.Attempts != 1 || sr.CreatedAt == 0 {
				t.Fatalf("the reset's record %+v", sr)
			}
			other := openTest(t, "")
			if err := other.ApplyRecords(ctx, []Record{{Event: eventRec()}, {Round: roundRec(StateDead, 3, 1, 410)},
				{State: &sr}}, 3); err != nil {
				t.Fatal(err)
			}
			if od, _ := other.Delivery(ctx, "billing", "stripe", "evt_1"); od.State != StatePending || od.Attempts != 1 {
				t.Fatalf("on another store: %+v, want pending after 1 attempt", od)
			}

			// Put back (the operator's round ran nothing): dead again.
			if _, err := s.SetDeliveryState(ctx, d.ID, StateDead); err != nil {
				t.Fatal(err)
			}
			back := &StateRecord{Origin: "gw1", Route: "billing", Source: "stripe", EventID: "evt_1", State: StateDead,
				Attempts: 1, Rounds: 1, Version: 8}
			if err := s.RecordClusterState(ctx, back); err != nil {
				t.Fatal(err)
			}
			out, _ = s.RecordsOut(ctx, 10)
			if len(out) != 2 || out[1].MsgID != "state:hg_k:8" {
				t.Fatalf("records out %+v; want the put-back's after the reset's", out)
			}
			if err := json.Unmarshal(out[1].Data, &sr); err != nil {
				t.Fatal(err)
			}
			if err := other.ApplyRecords(ctx, []Record{{State: &sr}}, 4); err != nil {
				t.Fatal(err)
			}
			if od, _ := other.Delivery(ctx, "billing", "stripe", "evt_1"); od.State != StateDead {
				t.Fatalf("on another store after the put-back: %s, want dead", od.State)
			}
		})
	}
}
