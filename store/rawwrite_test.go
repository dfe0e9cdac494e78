package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestHotWriteAllocations: the writer runs claims, delivery rounds and
// acks on its driver connection; database/sql's boxes, argument slices,
// results and transaction (a goroutine and a context) are not paid per
// write. Allocations per write in a batch of 64, committed by the
// writer's own code.
func TestHotWriteAllocations(t *testing.T) {
	s := openTest(t, "")
	const batch = 64
	body := make([]byte, 1024)
	var n int
	seqs := make([]int64, 0, 64*batch)
	at := []Attempt{{StartedAt: time.Now(), Duration: time.Millisecond, Status: 204, Response: []byte{}}}
	evs := make([]Event, batch)
	ds := make([]Delivery, batch)
	ops := make([]*op, batch)
	commit := func() {
		if err := s.commit(ops); err != nil {
			t.Fatal(err)
		}
		for _, o := range ops {
			if o.err != nil {
				t.Fatal(o.err)
			}
		}
	}
	for _, c := range []struct {
		name string
		max  float64 // per write
		fill func()
	}{
		{"claim", 13, func() {
			for j := range ops {
				n++
				evs[j] = Event{Source: "stripe", ID: "evt_" + fmt.Sprint(n), Type: "invoice.paid",
					ContentType: "application/json", Headers: []byte("{}"), Body: body, ReceivedAt: time.Now()}
				ops[j] = &op{claim: &evs[j]}
			}
		}},
		{"round", 18, func() {
			for j := range ops {
				n++
				ds[j] = Delivery{EventSeq: int64(n), Route: "billing", Source: "stripe", EventID: "evt_" + fmt.Sprint(n),
					EventType: "invoice.paid", IdempotencyKey: "hg_k", State: StateSucceeded, LastStatus: 204}
				ops[j] = &op{round: &ds[j], attempts: at, now: time.Now().UnixMilli()}
			}
		}},
		{"mark published", 7, func() {
			for j := range ops {
				if len(seqs) == 0 {
					t.Fatal("no claimed events left to mark")
				}
				ops[j] = &op{published: []Published{{Seq: seqs[0], StreamSeq: seqs[0]}}, now: time.Now().UnixMilli(), outboxSafe: true}
				seqs = seqs[1:]
			}
		}},
	} {
		var allocs uint64
		for range 3 { // the first batches prepare statements and grow caches
			c.fill()
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			commit()
			runtime.ReadMemStats(&m1)
			allocs = m1.Mallocs - m0.Mallocs
			for j := range ops {
				if ops[j].claim != nil && !ops[j].dup {
					seqs = append(seqs, ops[j].claim.Seq)
				}
			}
		}
		if per := float64(allocs) / batch; per > c.max {
			t.Errorf("%s: %.1f allocations per write in a batch of %d, want at most %.0f", c.name, per, batch, c.max)
		} else {
			t.Logf("%s: %.1f allocations per write", c.name, per)
		}
	}
}

// TestHotWriteFailureFailsItsBatch: a hot write that fails fails its whole
// batch (nothing of it is stored, every op gets the error), in a batch of
// hot writes only and in one with a generic write, and the writer's
// connection goes on: the next batches commit and lookups answer.
func TestHotWriteFailureFailsItsBatch(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "")
	if err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TRIGGER refuse BEFORE INSERT ON events WHEN NEW.event_id LIKE 'evt_bad%'
			BEGIN SELECT RAISE(ABORT, 'refused'); END`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	generic := func() *op {
		return &op{fn: func(tx *sql.Tx) error {
			_, err := tx.Exec(`INSERT INTO meta (key, value) VALUES ('k', 'v') ON CONFLICT (key) DO UPDATE SET value = 'v'`)
			return err
		}}
	}
	claim := func(id string) *op {
		ev := testEvent(id)
		ev.Headers = []byte("{}") // as Claim sets it
		return &op{claim: ev}
	}
	stored := func(id string) bool {
		t.Helper()
		var n int
		if err := s.r.QueryRow(`SELECT count(*) FROM events WHERE event_id = ?`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	for i, batch := range [][]*op{
		{claim("evt_a1"), claim("evt_bad1"), claim("evt_a2")},
		{claim("evt_b1"), generic(), claim("evt_bad2"), claim("evt_b2")},
	} {
		err := s.commit(batch)
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "refused") {
			t.Fatalf("batch %d: commit = %v, want the trigger's refusal", i, err)
		}
		for _, o := range batch {
			if o.claim != nil && stored(o.claim.ID) {
				t.Fatalf("batch %d: %s stored by a failed batch", i, o.claim.ID)
			}
		}
		// The connection is outside any transaction: a lookup answers,
		// and the same writes without the refused one commit.
		if _, err := s.DeliveryStatus(ctx, "r", 1, "stripe", "evt_a1"); err != nil && !errors.Is(err, ErrOtherEvent) && !errors.Is(err, ErrNotFound) {
			t.Fatalf("batch %d: lookup after the failure: %v", i, err)
		}
		var good []*op
		for _, o := range batch {
			if o.claim == nil || !strings.HasPrefix(o.claim.ID, "evt_bad") {
				o.err = nil
				good = append(good, o)
			}
		}
		if err := s.commit(good); err != nil {
			t.Fatalf("batch %d without the refused write: %v", i, err)
		}
		for _, o := range good {
			if o.err != nil || o.claim != nil && (o.dup || !stored(o.claim.ID)) {
				t.Fatalf("batch %d without the refused write: %+v", i, o)
			}
		}
	}
}

// TestHotBatchAfterStrayTransaction: should the writer's connection ever
// be left inside a transaction, the next batch of hot writes fails and
// rolls it back, and the one after commits.
func TestHotBatchAfterStrayTransaction(t *testing.T) {
	s := openTest(t, "")
	conn, err := s.w.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), "BEGIN"); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	claim := func(id string) []*op {
		ev := testEvent(id)
		ev.Headers = []byte("{}")
		return []*op{{claim: ev}}
	}
	if err := s.commit(claim("evt_1")); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("batch on a connection inside a transaction: %v, want ErrUnavailable", err)
	}
	batch := claim("evt_2")
	if err := s.commit(batch); err != nil || batch[0].dup {
		t.Fatalf("the next batch: %v (dup %v)", err, batch[0].dup)
	}
	if _, err := s.DeliveryStatus(context.Background(), "r", batch[0].claim.Seq, "stripe", "evt_2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("lookup after it: %v, want ErrNotFound", err)
	}
}

// TestGivenUpConnectionFreesTheWriteLock: a writer connection given up
// inside a transaction (driver.ErrBadConn, as abort does when its
// ROLLBACK fails) is closed for good, its transaction and write lock with
// it, so that the next batch commits on a new connection.
func TestGivenUpConnectionFreesTheWriteLock(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	first := []*op{{claim: testEvent("evt_1")}}
	first[0].claim.Headers = []byte("{}")
	if err := s.commit(first); err != nil { // prepares the writer's statements
		t.Fatal(err)
	}
	conn, err := s.w.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = conn.Raw(func(dc any) error {
		c := dc.(driver.Conn)
		if err := s.rw.on(c); err != nil {
			return err
		}
		if _, err := s.rw.begin.ExecContext(ctx, nil); err != nil {
			return err
		}
		return s.giveUp(driver.ErrBadConn)
	})
	conn.Close()
	if !errors.Is(err, driver.ErrBadConn) {
		t.Fatalf("raw: %v", err)
	}
	batch := []*op{{claim: testEvent("evt_2")}}
	batch[0].claim.Headers = []byte("{}")
	if err := s.commit(batch); err != nil || batch[0].dup {
		t.Fatalf("the next batch: %v (dup %v)", err, batch[0].dup)
	}
}
