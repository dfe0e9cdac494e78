package store

import (
	"context"
	"testing"
	"time"
)

// An event set aside for its content (parked) stays parked when an
// operator's round of it is cut short, as one this gateway took from its
// sender does: Requeue publishes anew only what left the outbox
// published. Here the event came as another gateway's record, was
// published anew from here for a first retry cut short and refused by
// the broker (parked); a second retry is cut short too.
func TestRequeueLeavesParkedReplicaAlone(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	if err := s.ApplyRecords(ctx, []Record{{Event: eventRec()}}, 1); err != nil {
		t.Fatal(err)
	}
	ev, err := s.GetEvent(ctx, "stripe", "evt_1")
	if err != nil {
		t.Fatal(err)
	}
	reset := func() {
		t.Helper()
		if _, err := s.ResetDelivery(ctx, &Delivery{EventSeq: ev.Seq, Route: "billing", Source: "stripe",
			EventID: "evt_1", EventType: "invoice.paid", IdempotencyKey: "hg_k"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	reset()
	if err := s.Requeue(ctx, nil, []int64{ev.Seq}); err != nil {
		t.Fatal(err)
	}
	if got := outboxSeqs(t, s); len(got) != 1 {
		t.Fatalf("outbox after the first requeue = %v, want [%d]", got, ev.Seq)
	}
	if err := s.Park(ctx, ev.Seq, "nats: maximum payload exceeded", time.Now()); err != nil {
		t.Fatal(err)
	}
	reset()
	if err := s.Requeue(ctx, nil, []int64{ev.Seq}); err != nil {
		t.Fatal(err)
	}
	if got := outboxSeqs(t, s); len(got) != 0 {
		uerr := s.Unpark(ctx, ev.Seq)
		t.Fatalf("a parked event is in the outbox too after Requeue: outbox %v (Unpark then: %v); want it parked only", got, uerr)
	}
}
