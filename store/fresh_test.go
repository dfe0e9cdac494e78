package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// An event's first lookup for a route is answered from memory; once a
// round of it to that route is recorded, or after a write of another kind,
// the writer answers.
func TestFreshLookup(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "")
	ev := testEvent("evt_1")
	if _, err := s.Claim(ctx, ev); err != nil {
		t.Fatal(err)
	}
	look := func(route, id string, wantErr error, wantHit bool) {
		t.Helper()
		hits := s.fresh.hits.Load()
		_, err := s.DeliveryStatus(ctx, route, ev.Seq, ev.Source, id)
		if !errors.Is(err, wantErr) || wantErr == nil && err != nil {
			t.Fatalf("DeliveryStatus(%s, %s) = %v, want %v", route, id, err, wantErr)
		}
		if hit := s.fresh.hits.Load() > hits; hit != wantHit {
			t.Fatalf("DeliveryStatus(%s, %s) from memory = %v, want %v", route, id, hit, wantHit)
		}
	}
	look("billing", "evt_1", ErrNotFound, true)
	look("billing", "evt_other", ErrOtherEvent, false) // another event under that seq: the writer says so
	d := &Delivery{EventSeq: ev.Seq, Route: "billing", Source: ev.Source, EventID: ev.ID, IdempotencyKey: "k", State: StateRetrying}
	if err := s.RecordRound(ctx, d, []Attempt{{StartedAt: time.Now(), Status: 500}}); err != nil {
		t.Fatal(err)
	}
	look("billing", "evt_1", nil, false)
	look("audit", "evt_1", ErrNotFound, true) // another route has none yet
	if _, err := s.SetDeliveryState(ctx, d.ID, StatePending); err != nil {
		t.Fatal(err)
	}
	look("audit", "evt_1", ErrNotFound, false) // an operator's write: the writer answers from now on

	// Source and ID are told apart however their bytes split.
	odd := &Event{Source: "a", ID: "b\x00c", Body: []byte(`{}`), ReceivedAt: time.Now()}
	if _, err := s.Claim(ctx, odd); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeliveryStatus(ctx, "billing", odd.Seq, "a\x00b", "c"); !errors.Is(err, ErrOtherEvent) {
		t.Fatalf("DeliveryStatus of (a\\x00b, c) under (a, b\\x00c)'s seq = %v, want ErrOtherEvent", err)
	}
}

// Whatever the writes before it, DeliveryStatus answers what the writer's
// queries answer: claims, duplicates, rounds on several routes, delivery
// rows written by a replica's records, an operator's reset, an adopted
// event, pruned events, a failed batch, and a ring small enough to wrap.
func TestFreshAgreesWithQueries(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { freshAgreesWithQueries(t, seed) })
	}
}

func freshAgreesWithQueries(t *testing.T, seed uint64) {
	ctx := context.Background()
	s := openTest(t, "")
	s.fresh = newFresh(8) // before any write: the writer reads it only after one
	rng := rand.New(rand.NewPCG(seed, 42))
	routes := []string{"a", "b", "c"}
	ids := map[int64]string{} // seq → event ID, of events claimed
	var seqs []int64
	next := 0
	newID := func() string { next++; return fmt.Sprintf("evt_%d", next) }
	someSeq := func() (int64, string) {
		if len(seqs) == 0 {
			return 1, "evt_none"
		}
		// Mostly the newest, as the engine asks.
		i := len(seqs) - 1 - min(len(seqs)-1, int(rng.ExpFloat64()*4))
		return seqs[i], ids[seqs[i]]
	}
	for step := range 400 {
		var what string
		switch k := rng.IntN(20); {
		case k < 8:
			what = "claim"
			id := newID()
			if rng.IntN(5) == 0 && next > 1 {
				id = fmt.Sprintf("evt_%d", 1+rng.IntN(next-1)) // a duplicate
			}
			ev := testEvent(id)
			dup, err := s.Claim(ctx, ev)
			if err != nil {
				t.Fatal(err)
			}
			if !dup {
				ids[ev.Seq], seqs = id, append(seqs, ev.Seq)
			}
		case k < 15:
			what = "round"
			seq, id := someSeq()
			if _, ok := ids[seq]; !ok {
				continue
			}
			d := &Delivery{EventSeq: seq, Route: routes[rng.IntN(len(routes))], Source: "stripe", EventID: id,
				IdempotencyKey: "k", State: StateRetrying}
			if err := s.RecordRound(ctx, d, []Attempt{{StartedAt: time.Now(), Status: 500}}); err != nil {
				t.Fatal(err)
			}
		case k == 15:
			what = "replica's round" // a delivery row written by another kind of write
			seq, id := someSeq()
			if _, ok := ids[seq]; !ok {
				continue
			}
			r := roundRec(StateRetrying, uint64(step+1), 1, 500)
			r.EventID, r.Route = id, routes[rng.IntN(len(routes))]
			if err := s.ApplyRecords(ctx, []Record{{Round: r}}, uint64(step+1)); err != nil {
				t.Fatal(err)
			}
		case k == 16:
			what = "adopted event"
			if _, _, err := s.AdoptEvent(ctx, testEvent(newID()), int64(step)); err != nil {
				t.Fatal(err)
			}
		case k == 17:
			what = "pruned events" // every published event but the newest, with its deliveries
			var acks []Published
			for _, seq := range seqs {
				acks = append(acks, Published{Seq: seq, StreamSeq: seq})
			}
			if err := s.MarkPublished(ctx, acks, time.Now()); err != nil {
				t.Fatal(err)
			}
			if _, _, _, err := s.PruneEvents(ctx, time.Now().Add(time.Hour), EventCursor{}, 1000,
				func(*OldEvent) bool { return false }); err != nil {
				t.Fatal(err)
			}
		case k == 18:
			what = "failed batch" // a claim without a body fails, and a round with it
			seq, id := someSeq()
			errc := make(chan error, 1)
			go func() {
				d := &Delivery{EventSeq: seq, Route: "a", Source: "stripe", EventID: id, IdempotencyKey: "k", State: StateRetrying}
				errc <- s.RecordRound(ctx, d, []Attempt{{StartedAt: time.Now(), Status: 500}})
			}()
			_, _ = s.Claim(ctx, &Event{Source: "stripe", ID: newID(), ReceivedAt: time.Now()})
			<-errc
		default:
			what = "operator replay" // a delivery row, also of a route with no round yet
			seq, id := someSeq()
			if _, ok := ids[seq]; !ok {
				continue
			}
			d := &Delivery{EventSeq: seq, Route: routes[rng.IntN(len(routes))], Source: "stripe", EventID: id, IdempotencyKey: "k"}
			if _, err := s.ResetDelivery(ctx, d, nil); err != nil {
				t.Fatal(err)
			}
		}
		// Probe the newest events on every route, as themselves and as
		// another event, and a seq not stored.
		for i := max(0, len(seqs)-12); i < len(seqs); i++ {
			for _, route := range routes {
				probeFresh(ctx, t, s, what, route, seqs[i], ids[seqs[i]])
				probeFresh(ctx, t, s, what, route, seqs[i], "evt_other")
			}
		}
		if len(seqs) > 0 {
			probeFresh(ctx, t, s, what, "a", seqs[len(seqs)-1]+100, "evt_none")
		}
	}
	if s.fresh.hits.Load() == 0 {
		t.Fatal("no lookup was answered from memory")
	}
}

// probeFresh fails unless DeliveryStatus and the writer's queries agree.
func probeFresh(ctx context.Context, t *testing.T, s *Store, after, route string, seq int64, id string) {
	t.Helper()
	hits := s.fresh.hits.Load()
	got, gerr := s.DeliveryStatus(ctx, route, seq, "stripe", id)
	want, werr := s.queryStatus(ctx, route, seq, "stripe", id)
	if got != want || !errors.Is(gerr, werr) && !(gerr == nil && werr == nil) {
		t.Fatalf("after %s: DeliveryStatus(%s, %d, %s) = %+v, %v (from memory: %v); the queries say %+v, %v",
			after, route, seq, id, got, gerr, s.fresh.hits.Load() > hits, want, werr)
	}
}
