package store

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"
)

// Unpublished serves the newest events from the tail once a query caught
// up, with the bytes as claimed even when the caller's buffer is reused, and
// stops at a write that may queue events behind its back.
func TestUnpublishedFromTail(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "")
	claim := func(id string, body []byte) *Event {
		t.Helper()
		ev := &Event{Source: "stripe", ID: id, Type: "invoice.paid", ContentType: "application/json",
			Body: body, ReceivedAt: time.Now()}
		if dup, err := s.Claim(ctx, ev); err != nil || dup {
			t.Fatalf("claim %s: dup=%v err=%v", id, dup, err)
		}
		return ev
	}
	read := func(after int64, wantHit bool) []Event {
		t.Helper()
		want, err := s.queryUnpublished(ctx, after, 100)
		if err != nil {
			t.Fatal(err)
		}
		hits := s.tail.hits.Load()
		got, err := s.Unpublished(ctx, after, 100)
		if err != nil {
			t.Fatal(err)
		}
		if hit := s.tail.hits.Load() > hits; hit != wantHit {
			t.Errorf("Unpublished(%d) served from memory = %v, want %v", after, hit, wantHit)
		}
		if len(got) != len(want) || (len(got) > 0 && !reflect.DeepEqual(got, want)) {
			t.Fatalf("Unpublished(%d) =\n%+v\nthe table holds\n%+v", after, got, want)
		}
		return got
	}

	e1 := claim("evt_1", []byte(`{"id":"evt_1"}`))
	read(0, false) // a pass starts with a query, which arms the tail
	buf := []byte(`{"id":"evt_2"}`)
	e2 := claim("evt_2", buf)
	copy(buf, "XXXXXXXXXXXXXX") // the caller reuses its buffer, as Fiber does
	e3 := claim("evt_3", []byte(`{"id":"evt_3"}`))
	if dup, err := s.Claim(ctx, testEvent("evt_1")); err != nil || !dup {
		t.Fatalf("claim of a duplicate: dup=%v err=%v", dup, err)
	}
	if got := read(e1.Seq, true); len(got) != 2 || string(got[0].Body) != `{"id":"evt_2"}` {
		t.Fatalf("after evt_1: got %d events, first body %q", len(got), got[0].Body)
	}
	read(e2.Seq, true)
	read(e1.Seq, false) // behind what it was asked last: the table
	read(0, false)      // from the start: always the table

	// A recorded ack leaves the tail in use; a requeue (any write not
	// marked as leaving the outbox alone) turns it off: the next read
	// queries, and arms it again.
	if err := s.MarkPublished(ctx, []Published{{Seq: e1.Seq, StreamSeq: 1}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	e4 := claim("evt_4", []byte(`{"id":"evt_4"}`))
	read(e3.Seq, true)
	if err := s.Requeue(ctx, []int64{e1.Seq}, nil); err != nil {
		t.Fatal(err)
	}
	read(e4.Seq, false)
	e5 := claim("evt_5", []byte(`{}`))
	read(e4.Seq, true)
	// A write of another kind that queues an event (as a task does).
	other := testEvent("task_1")
	other.Headers = []byte("{}")
	if err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := insertEvent(tx.Stmt(s.stmts.claim), tx.Stmt(s.stmts.enqueue), other)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := read(e5.Seq, false); len(got) != 1 || got[0].ID != "task_1" {
		t.Fatalf("after a write that queued an event, Unpublished gave %+v", got)
	}
}

// Under concurrent claims, acks and requeues, a reader that works like the
// relay (a cursor, back to the start when a read finds nothing) gets every
// event in order and misses none: once the claims stop, reading on from its
// cursor leaves nothing after it in the outbox.
func TestTailMatchesTableUnderLoad(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "")
	const claimers, perClaimer = 4, 300
	var wg sync.WaitGroup
	claimed := make(chan int64, claimers*perClaimer)
	for c := range claimers {
		wg.Go(func() {
			for i := range perClaimer {
				id := fmt.Sprintf("evt_%d_%d", c, i)
				if i%10 == 9 {
					id = fmt.Sprintf("evt_%d_%d", c, i-1) // a provider's retry
				}
				ev := testEvent(id)
				dup, err := s.Claim(ctx, ev)
				if err != nil {
					t.Error(err)
					return
				}
				if !dup {
					claimed <- ev.Seq
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	seen := map[int64]bool{}
	var cursor int64
	readOn := func() int {
		t.Helper()
		prev := cursor
		evs, err := s.Unpublished(ctx, cursor, 32)
		if err != nil {
			t.Fatal(err)
		}
		// Only this reader takes events out of the outbox, and claims add
		// seqs after every existing one: what a read skipped is still there.
		if len(evs) > 0 {
			last := evs[len(evs)-1].Seq
			if n := count(t, s, `SELECT count(*) FROM outbox WHERE seq > ? AND seq <= ?`, prev, last); n != len(evs) {
				t.Fatalf("Unpublished(%d) gave %d events up to seq %d; the outbox holds %d there", prev, len(evs), last, n)
			}
		}
		acks := make([]Published, 0, len(evs))
		for _, ev := range evs {
			if ev.Seq <= cursor {
				t.Fatalf("after %d, Unpublished gave seq %d", cursor, ev.Seq)
			}
			cursor = ev.Seq
			seen[ev.Seq] = true
			acks = append(acks, Published{Seq: ev.Seq, StreamSeq: ev.Seq})
		}
		if err := s.MarkPublished(ctx, acks, time.Now()); err != nil {
			t.Fatal(err)
		}
		return len(evs)
	}
	for reads := 0; ; reads++ {
		select {
		case <-done:
		default:
			if readOn() == 0 && rand.N(4) == 0 {
				cursor = 0 // a new pass
			}
			if reads%20 == 10 && len(seen) > 0 { // now and then, recovery puts an event back
				for seq := range seen {
					if err := s.Requeue(ctx, []int64{seq}, nil); err != nil {
						t.Fatal(err)
					}
					break
				}
			}
			continue
		}
		break
	}
	for readOn() > 0 {
	}
	if n := count(t, s, fmt.Sprintf(`SELECT count(*) FROM outbox WHERE seq > %d`, cursor)); n != 0 {
		t.Fatalf("reading on from seq %d found nothing, but the outbox holds %d events after it", cursor, n)
	}
	cursor = 0
	for readOn() > 0 {
	}
	if n := count(t, s, `SELECT count(*) FROM outbox`); n != 0 {
		t.Fatalf("after a pass from the start, the outbox still holds %d events", n)
	}
	close(claimed)
	for seq := range claimed {
		if !seen[seq] {
			t.Errorf("event %d was never read", seq)
		}
	}
	if s.tail.hits.Load() == 0 {
		t.Error("no read was served from memory")
	}
	checkPublishState(t, s)
}
