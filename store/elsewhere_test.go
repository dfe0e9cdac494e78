package store

import (
	"context"
	"testing"
	"time"
)

// An event claimed by another gateway leaves the outbox, is never read
// for publishing again, stays a duplicate here, and is pruned after the
// retention period although no route ever finished it here.
func TestClaimedElsewhere(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	old, next := testEvent("evt_elsewhere"), testEvent("evt_next")
	old.ReceivedAt = time.Now().Add(-48 * time.Hour)
	for _, ev := range []*Event{old, next} {
		if _, err := s.Claim(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.ClaimedElsewhere(ctx, old.Seq, "gw-b", time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := outboxSeqs(t, s); len(got) != 1 || got[0] != next.Seq {
		t.Fatalf("outbox after ClaimedElsewhere = %v, want [%d]", got, next.Seq)
	}
	evs, err := s.Unpublished(ctx, 0, 10)
	if err != nil || len(evs) != 1 || evs[0].ID != "evt_next" {
		t.Fatalf("Unpublished after ClaimedElsewhere = %+v, %v", evs, err)
	}
	if h, err := s.HolderElsewhere(ctx, old.Seq); err != nil || h != "gw-b" {
		t.Fatalf("HolderElsewhere = %q, %v; want gw-b", h, err)
	}
	if h, err := s.HolderElsewhere(ctx, next.Seq); err != nil || h != "" {
		t.Fatalf("HolderElsewhere(next) = %q, %v; want none", h, err)
	}
	if dup, err := s.Claim(ctx, testEvent("evt_elsewhere")); err != nil || !dup {
		t.Fatalf("a later copy: dup = %v, %v; want a duplicate", dup, err)
	}
	keepAll := func(*OldEvent) bool { return true } // as if every route still owed it
	res, _, _, err := s.PruneEvents(ctx, time.Now().Add(-time.Hour), EventCursor{}, 10, keepAll)
	if err != nil || res.Events != 1 {
		t.Fatalf("PruneEvents = %+v, %v; want 1 event", res, err)
	}
	if n, err := s.CountClaimedElsewhere(ctx); err != nil || n != 0 {
		t.Errorf("%d claimed_elsewhere rows left (%v)", n, err)
	}
}
