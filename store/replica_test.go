package store

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"
)

func roundRec(state string, version uint64, first int, statuses ...int) *RoundRecord {
	r := &RoundRecord{Origin: "gw2", Route: "billing", Source: "stripe", EventID: "evt_1", EventType: "invoice.paid",
		IdempotencyKey: "hg_k", State: state, Attempts: first - 1 + len(statuses), Rounds: 1, CreatedAt: 1000,
		UpdatedAt: 2000 + int64(version), Version: version, FirstAttempt: first}
	for _, st := range statuses {
		r.AttemptList = append(r.AttemptList, RecordAttempt{StartedAt: 1500, DurationMS: 3, Status: st})
		r.LastStatus = st
	}
	return r
}

func eventRec() *EventRecord {
	return &EventRecord{Origin: "gw1", Source: "stripe", ID: "evt_1", Type: "invoice.paid", ContentType: "application/json",
		Headers: []byte(`{"Stripe-Signature":"t=1"}`), ReceivedAt: 1234, Body: []byte(`{"id":"evt_1"}`)}
}

// A round applied before its event is kept and linked when the event
// comes; an older round after a newer one changes nothing but its
// attempts; a repeat changes nothing; the position moves with each write.
func TestApplyRecords(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	if err := s.ApplyRecords(ctx, []Record{{Round: roundRec(StateRetrying, 5, 1, 500)}}, 7); err != nil {
		t.Fatal(err)
	}
	dead, err := s.ListDeliveries(ctx, DeliveryFilter{State: StateRetrying})
	if err != nil || len(dead) != 1 || dead[0].EventSeq >= 0 {
		t.Fatalf("a round before its event: %+v, %v; want one delivery under a negative seq", dead, err)
	}
	if err := s.ApplyRecords(ctx, []Record{{Event: eventRec()}}, 8); err != nil {
		t.Fatal(err)
	}
	ev, err := s.GetEvent(ctx, "stripe", "evt_1")
	if err != nil || string(ev.Headers) != `{"Stripe-Signature":"t=1"}` || ev.ReceivedAt.UnixMilli() != 1234 {
		t.Fatalf("event: %+v, %v", ev, err)
	}
	d, err := s.Delivery(ctx, "billing", "stripe", "evt_1")
	if err != nil || d.EventSeq != ev.Seq || d.State != StateRetrying {
		t.Fatalf("the delivery was not linked to its event: %+v, %v", d, err)
	}
	var origin string
	if err := s.r.QueryRow(`SELECT origin FROM replica_events WHERE seq = ?`, ev.Seq).Scan(&origin); err != nil || origin != "gw1" {
		t.Fatalf("an event from a record is gw1's here: %q, %v", origin, err)
	}
	if n, _ := s.CountClaimedElsewhere(ctx); n != 0 {
		t.Fatalf("an event from a record counted as a copy claimed elsewhere")
	}
	if n, _, _ := s.Counts(ctx); n != 1 {
		t.Fatalf("%d events", n)
	}
	if _, unpublished, _ := s.Counts(ctx); unpublished != 0 {
		t.Fatalf("an event from a record is in the outbox")
	}
	// The newer round, then the older one again (and a repeat).
	newer := roundRec(StateSucceeded, 9, 2, 200)
	older := roundRec(StateDead, 6, 2, 410)
	if err := s.ApplyRecords(ctx, []Record{{Round: newer}, {Round: older}, {Round: newer}}, 11); err != nil {
		t.Fatal(err)
	}
	d, _ = s.Delivery(ctx, "billing", "stripe", "evt_1")
	if d.State != StateSucceeded || d.Attempts != 2 || d.LastStatus != 200 {
		t.Fatalf("after a newer and an older round: %+v, want succeeded, 2 attempts", d)
	}
	at, err := s.Attempts(ctx, d.ID)
	if err != nil || len(at) != 2 || at[0].Status != 500 || at[1].Status != 200 {
		t.Fatalf("attempts %+v, %v: want 500 then 200, once each", at, err)
	}
	if pos, err := s.RecordsPosition(ctx); err != nil || pos != 11 {
		t.Fatalf("position %d, %v; want 11", pos, err)
	}
}

// A batch that fails leaves neither its records nor its position: the
// records are read again and applied once.
func TestApplyRecordsExactlyOnce(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	if err := s.ApplyRecords(ctx, []Record{{Event: eventRec()}}, 3); err != nil {
		t.Fatal(err)
	}
	bad := roundRec(StateSucceeded, 4, 1, 200)
	bad.AttemptList = append(bad.AttemptList, bad.AttemptList[0])
	bad.FirstAttempt = 1
	if _, err := s.w.Exec("PRAGMA query_only = 1"); err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyRecords(ctx, []Record{{Round: roundRec(StateSucceeded, 4, 1, 200)}}, 4); err == nil {
		t.Fatal("applied on a read-only store")
	}
	if _, err := s.w.Exec("PRAGMA query_only = 0"); err != nil {
		t.Fatal(err)
	}
	if pos, _ := s.RecordsPosition(ctx); pos != 3 {
		t.Fatalf("position %d after a failed batch, want 3", pos)
	}
	if _, err := s.Delivery(ctx, "billing", "stripe", "evt_1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a failed batch's round was stored: %v", err)
	}
	for range 2 { // read again, twice
		if err := s.ApplyRecords(ctx, []Record{{Round: roundRec(StateSucceeded, 4, 1, 200)}}, 4); err != nil {
			t.Fatal(err)
		}
	}
	d, _ := s.Delivery(ctx, "billing", "stripe", "evt_1")
	if at, _ := s.Attempts(ctx, d.ID); d.Attempts != 1 || len(at) != 1 {
		t.Fatalf("applied twice: %+v, %d attempts", d, len(at))
	}
}

// A local copy (adopted from the stream) takes the original's headers
// and receipt time from the event's record.
func TestApplyEventRecordToCopy(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	seq, _, err := s.AdoptEvent(ctx, &Event{Source: "stripe", ID: "evt_1", Body: []byte(`{}`)}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyRecords(ctx, []Record{{Event: eventRec()}}, 1); err != nil {
		t.Fatal(err)
	}
	ev, _ := s.GetEvent(ctx, "stripe", "evt_1")
	if ev.Seq != seq || string(ev.Headers) != `{"Stripe-Signature":"t=1"}` || ev.ReceivedAt.UnixMilli() != 1234 {
		t.Fatalf("copy after the record: %+v", ev)
	}
}

// A task's record carries its owner, so the task API's scope works here.
func TestApplyTaskRecord(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	rec := eventRec()
	rec.Source, rec.ID, rec.Scope = TaskSource, "task_1", "scope-a"
	if err := s.ApplyRecords(ctx, []Record{{Event: rec}}, 1); err != nil {
		t.Fatal(err)
	}
	if sc, err := s.TaskScope(ctx, "task_1"); err != nil || sc != "scope-a" {
		t.Fatalf("task scope %q, %v", sc, err)
	}
}

// A cluster round is written with its record in one transaction: both or
// neither; its attempts take the cluster's numbers.
func TestRecordClusterRound(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	ev := testEvent("evt_1")
	if _, err := s.Claim(ctx, ev); err != nil {
		t.Fatal(err)
	}
	d := &Delivery{EventSeq: ev.Seq, Route: "billing", Source: "stripe", EventID: "evt_1", IdempotencyKey: "hg_k",
		State: StateRetrying, Rounds: 1, LastStatus: 500}
	at := []Attempt{{StartedAt: time.Now(), Status: 500}}
	c := ClusterRound{Origin: "gw1", FirstAttempt: 3, Attempts: 3, Version: 12}
	if _, err := s.w.Exec("PRAGMA query_only = 1"); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordClusterRound(ctx, d, at, c); err == nil {
		t.Fatal("recorded on a read-only store")
	}
	if _, err := s.w.Exec("PRAGMA query_only = 0"); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.CountRecordsOut(ctx); n != 0 {
		t.Fatalf("%d records out of a failed round", n)
	}
	if err := s.RecordClusterRound(ctx, d, at, c); err != nil {
		t.Fatal(err)
	}
	if d.Attempts != 3 {
		t.Fatalf("attempts %d, want the cluster's 3", d.Attempts)
	}
	got, _ := s.Attempts(ctx, d.ID)
	if len(got) != 1 || got[0].Attempt != 3 {
		t.Fatalf("attempts %+v, want one numbered 3", got)
	}
	out, err := s.RecordsOut(ctx, 10)
	if err != nil || len(out) != 1 || out[0].Subject != RoundRecordSubject {
		t.Fatalf("records out %+v, %v", out, err)
	}
	// Applied to another store, the record makes the same delivery.
	other := openTest(t, "")
	var rr RoundRecord
	if err := json.Unmarshal(out[0].Data, &rr); err != nil {
		t.Fatal(err)
	}
	if err := other.ApplyRecords(ctx, []Record{{Event: &EventRecord{Origin: "gw1", Source: "stripe", ID: "evt_1",
		ReceivedAt: 1}}, {Round: &rr}}, 2); err != nil {
		t.Fatal(err)
	}
	od, err := other.Delivery(ctx, "billing", "stripe", "evt_1")
	if err != nil || od.State != StateRetrying || od.Attempts != 3 {
		t.Fatalf("replica: %+v, %v", od, err)
	}
	if oa, _ := other.Attempts(ctx, od.ID); len(oa) != 1 || oa[0].Attempt != 3 || oa[0].Status != 500 {
		t.Fatalf("replica attempts %+v", oa)
	}
	if err := s.DeleteRecordsOut(ctx, []int64{out[0].ID}); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.CountRecordsOut(ctx); n != 0 {
		t.Fatalf("%d records out after delete", n)
	}
}

// Single-node mode writes none of the replica's tables.
func TestRecordRoundWritesNoRecords(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	ev := testEvent("evt_1")
	if _, err := s.Claim(ctx, ev); err != nil {
		t.Fatal(err)
	}
	d := &Delivery{EventSeq: ev.Seq, Route: "billing", Source: "stripe", EventID: "evt_1", IdempotencyKey: "k", State: StateSucceeded}
	if err := s.RecordRound(ctx, d, []Attempt{{StartedAt: time.Now(), Status: 200}}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.r.QueryRow(`SELECT (SELECT count(*) FROM records_out) + (SELECT count(*) FROM replica_events)
		+ (SELECT count(*) FROM deliveries WHERE version != 0)`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("replica rows %d, %v", n, err)
	}
}

// Retention prunes an event that came as a record once every route
// finished with it there, and keeps it while a route owes it.
func TestPruneReplicatedEvents(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	old := time.Now().Add(-48 * time.Hour).UnixMilli()
	done, owed := eventRec(), eventRec()
	done.ID, owed.ID, done.ReceivedAt, owed.ReceivedAt = "done", "owed", old, old
	rd, ro := roundRec(StateSucceeded, 1, 1, 200), roundRec(StateRetrying, 1, 1, 500)
	rd.EventID, ro.EventID = "done", "owed"
	newest := eventRec()
	newest.ID = "newest"
	if err := s.ApplyRecords(ctx, []Record{{Event: done}, {Event: owed}, {Round: rd}, {Round: ro}, {Event: newest}}, 5); err != nil {
		t.Fatal(err)
	}
	res, _, _, err := s.PruneEvents(ctx, time.Now().Add(-time.Hour), EventCursor{}, 100, nil)
	if err != nil || res.Events != 1 {
		t.Fatalf("pruned %+v, %v; want 1 event", res, err)
	}
	if _, err := s.GetEvent(ctx, "stripe", "done"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the finished event stays: %v", err)
	}
	if _, err := s.GetEvent(ctx, "stripe", "owed"); err != nil {
		t.Fatalf("the owed event was pruned: %v", err)
	}
}

// A round recorded here does not write over a newer round of the
// cluster applied meanwhile from another gateway's record.
func TestRecordClusterRoundAfterNewerRecord(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	ev := testEvent("evt_1")
	if _, err := s.Claim(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyRecords(ctx, []Record{{Round: roundRec(StateSucceeded, 10, 2, 200)}}, 1); err != nil {
		t.Fatal(err)
	}
	d := &Delivery{EventSeq: ev.Seq, Route: "billing", Source: "stripe", EventID: "evt_1", IdempotencyKey: "hg_k",
		State: StateRetrying, Rounds: 1, LastStatus: 500}
	if err := s.RecordClusterRound(ctx, d, []Attempt{{StartedAt: time.Now(), Status: 500}},
		ClusterRound{Origin: "gw1", FirstAttempt: 1, Attempts: 1, Version: 8}); err != nil {
		t.Fatal(err)
	}
	got, _ := s.Delivery(ctx, "billing", "stripe", "evt_1")
	if got.State != StateSucceeded || got.LastStatus != 200 || got.Attempts != 2 {
		t.Fatalf("the newer round was written over: %+v", got)
	}
	if at, _ := s.Attempts(ctx, got.ID); len(at) != 2 {
		t.Fatalf("attempts %+v: want both rounds'", at)
	}
}

// A round applied before its event is linked to the event however the
// event came here first (adopted from the stream, or a sender's copy at
// intake): when the event's record comes, or when a later round does.
// A round run here meanwhile made the route's row too: the two become
// one, the newer version's state with the attempts of both.
func TestRoundBeforeEventLinked(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		store func(*testing.T, *Store, *Event)
		then  func(*testing.T, *Store, *Event) // after the event is stored here
		want  string                           // state
		tries []int                            // attempt numbers
	}{
		{"adopted, then the event's record", adopt, applyEventRecord, StateRetrying, []int{1}},
		{"a sender's copy, then the event's record", claim, applyEventRecord, StateRetrying, []int{1}},
		{"adopted, then a newer round", adopt, func(t *testing.T, s *Store, _ *Event) {
			if err := s.ApplyRecords(ctx, []Record{{Round: roundRec(StateSucceeded, 6, 2, 200)}}, 3); err != nil {
				t.Fatal(err)
			}
		}, StateSucceeded, []int{1, 2}},
		{"adopted, a round here, then the event's record", adopt, func(t *testing.T, s *Store, ev *Event) {
			d := &Delivery{EventSeq: ev.Seq, Route: "billing", Source: "stripe", EventID: "evt_1", IdempotencyKey: "hg_k",
				State: StateSucceeded, Rounds: 1, LastStatus: 200}
			c := ClusterRound{Origin: "gw1", FirstAttempt: 2, Attempts: 2, Version: 7}
			if err := s.RecordClusterRound(ctx, d, []Attempt{{StartedAt: time.Now(), Status: 200}}, c); err != nil {
				t.Fatal(err)
			}
			applyEventRecord(t, s, ev)
		}, StateSucceeded, []int{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTest(t, "")
			if err := s.ApplyRecords(ctx, []Record{{Round: roundRec(StateRetrying, 5, 1, 500)}}, 1); err != nil {
				t.Fatal(err)
			}
			ev := &Event{Source: "stripe", ID: "evt_1", Type: "invoice.paid", Body: []byte(`{"id":"evt_1"}`)}
			tc.store(t, s, ev)
			tc.then(t, s, ev)
			all, err := s.ListDeliveries(ctx, DeliveryFilter{})
			if err != nil || len(all) != 1 {
				t.Fatalf("deliveries %+v, %v; want one", all, err)
			}
			d := all[0]
			if d.EventSeq != ev.Seq || d.State != tc.want {
				t.Fatalf("delivery under seq %d, %s; want under the event's seq %d, %s", d.EventSeq, d.State, ev.Seq, tc.want)
			}
			got, err := s.Attempts(ctx, d.ID)
			if err != nil {
				t.Fatal(err)
			}
			var tries []int
			for _, a := range got {
				tries = append(tries, a.Attempt)
			}
			if !slices.Equal(tries, tc.tries) {
				t.Fatalf("attempts %v, want %v", tries, tc.tries)
			}
		})
	}
}

func adopt(t *testing.T, s *Store, ev *Event) {
	t.Helper()
	seq, _, err := s.AdoptEvent(context.Background(), ev, 42)
	if err != nil {
		t.Fatal(err)
	}
	ev.Seq = seq
}

func claim(t *testing.T, s *Store, ev *Event) {
	t.Helper()
	if dup, err := s.Claim(context.Background(), ev); err != nil || dup {
		t.Fatal(dup, err)
	}
}

func applyEventRecord(t *testing.T, s *Store, _ *Event) {
	t.Helper()
	if err := s.ApplyRecords(context.Background(), []Record{{Event: eventRec()}}, 2); err != nil {
		t.Fatal(err)
	}
}
