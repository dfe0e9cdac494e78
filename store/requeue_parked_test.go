package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// An event set aside for its content (parked) and reset by an operator
// again leaves the parked events for the outbox when it is requeued anew
// (the new message carries the operator's round), and is in one of them
// only; requeued as first published (a round of its own message cut
// short) it stays parked. Here the event came as another gateway's
// record, was published anew from here for a first retry and refused by
// the broker (parked).
func TestRequeueAnewTakesParkedOut(t *testing.T) {
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
	if err := s.Requeue(ctx, []int64{ev.Seq}, nil); err != nil {
		t.Fatal(err)
	}
	if got := outboxSeqs(t, s); len(got) != 0 {
		t.Fatalf("outbox after a requeue as first published = %v, want it parked only", got)
	}
	reset()
	if err := s.Requeue(ctx, nil, []int64{ev.Seq}); err != nil {
		t.Fatal(err)
	}
	if got := outboxSeqs(t, s); len(got) != 1 {
		t.Fatalf("outbox after a requeue anew of the parked event = %v, want [%d]", got, ev.Seq)
	}
	if err := s.Unpark(ctx, ev.Seq); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Unpark after the requeue anew = %v, want ErrNotFound (not parked too)", err)
	}
	var anew, still bool
	if err := s.r.QueryRow(`SELECT requeued_at IS NOT NULL FROM outbox WHERE seq = ?`, ev.Seq).Scan(&anew); err != nil || !anew {
		t.Fatalf("outbox row after the requeue anew: requeued_at set %v (%v), want set", anew, err)
	}
	if err := s.r.QueryRow(`SELECT reset_at IS NOT NULL FROM deliveries WHERE event_seq = ?`, ev.Seq).Scan(&still); err != nil || still {
		t.Fatalf("delivery's reset_at after the requeue anew: set %v (%v), want cleared", still, err)
	}
}
