package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Park takes an event out of the outbox and lists it with its reason;
// Unpark puts it back; the oldest outbox event's receipt time follows.
func TestParkUnpark(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	received := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	big, next := testEvent("evt_big"), testEvent("evt_next")
	big.ReceivedAt = received
	for _, ev := range []*Event{big, next} {
		if _, err := s.Claim(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	if at, ok, err := s.OutboxOldest(ctx); err != nil || !ok || !at.Equal(received) {
		t.Fatalf("OutboxOldest = %v %v %v, want %v", at, ok, err, received)
	}
	if err := s.Park(ctx, big.Seq, "nats: maximum payload exceeded", time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := outboxSeqs(t, s); len(got) != 1 || got[0] != next.Seq {
		t.Fatalf("outbox after Park = %v, want [%d]", got, next.Seq)
	}
	evs, err := s.Unpublished(ctx, 0, 10)
	if err != nil || len(evs) != 1 || evs[0].ID != "evt_next" {
		t.Fatalf("Unpublished after Park = %+v, %v", evs, err)
	}
	if at, ok, err := s.OutboxOldest(ctx); err != nil || !ok || !at.Equal(next.ReceivedAt.Truncate(time.Millisecond)) {
		t.Fatalf("OutboxOldest after Park = %v %v %v", at, ok, err)
	}
	parked, err := s.Parked(ctx, 0, 10)
	if err != nil || len(parked) != 1 {
		t.Fatalf("Parked = %+v, %v", parked, err)
	}
	if p := parked[0]; p.Seq != big.Seq || p.ID != "evt_big" || p.Size != len(big.Body) || p.Reason != "nats: maximum payload exceeded" {
		t.Fatalf("parked = %+v", p)
	}
	if err := s.MarkPublished(ctx, []Published{{Seq: next.Seq, StreamSeq: 1}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.OutboxOldest(ctx); err != nil || ok {
		t.Fatalf("OutboxOldest with the outbox empty: ok %v, %v", ok, err)
	}
	if err := s.Unpark(ctx, big.Seq); err != nil {
		t.Fatal(err)
	}
	if err := s.Unpark(ctx, big.Seq); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Unpark = %v, want ErrNotFound", err)
	}
	if got := outboxSeqs(t, s); len(got) != 1 || got[0] != big.Seq {
		t.Fatalf("outbox after Unpark = %v, want [%d]", got, big.Seq)
	}
	if parked, err := s.Parked(ctx, 0, 10); err != nil || len(parked) != 0 {
		t.Fatalf("Parked after Unpark = %+v, %v", parked, err)
	}
	checkPublishState(t, s)
}

// Retention deletes a parked event's row with the event.
func TestPruneRemovesParked(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	old, last := testEvent("evt_old"), testEvent("evt_last")
	old.ReceivedAt = time.Now().Add(-48 * time.Hour)
	for _, ev := range []*Event{old, last} {
		if _, err := s.Claim(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Park(ctx, old.Seq, "refused", time.Now()); err != nil {
		t.Fatal(err)
	}
	res, _, _, err := s.PruneEvents(ctx, time.Now().Add(-time.Hour), EventCursor{}, 10, nil)
	if err != nil || res.Events != 1 {
		t.Fatalf("PruneEvents = %+v, %v; want 1 event", res, err)
	}
	if n := count(t, s, `SELECT count(*) FROM parked`); n != 0 {
		t.Errorf("%d parked rows left", n)
	}
}

// OutboxOldest (what /readyz reads) answers while operators' reads hold
// every reader of the pool: it has a connection of its own.
func TestOutboxOldestWhileReadersBusy(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	ev := testEvent("evt_1")
	if _, err := s.Claim(ctx, ev); err != nil {
		t.Fatal(err)
	}
	for range 4 { // Config.Readers' default
		c, err := s.r.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, ok, err := s.OutboxOldest(qctx); err != nil || !ok {
		t.Fatalf("OutboxOldest with every reader taken = %v %v, want the oldest event", ok, err)
	}
}
