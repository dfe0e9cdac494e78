package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mattn/go-sqlite3"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// Rounds add up: attempts are numbered on across rounds, a succeeded
// delivery stays succeeded, and d.ID and d.Attempts come back as stored.
func TestRecordRound(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	start := time.Now().Truncate(time.Millisecond)
	att := func(status int) Attempt {
		return Attempt{StartedAt: start, Duration: 3 * time.Millisecond, Status: status, Response: []byte("r")}
	}
	ev := testEvent("evt_1")
	if _, err := s.Claim(ctx, ev); err != nil {
		t.Fatal(err)
	}
	seq := ev.Seq
	if _, err := s.DeliveryStatus(ctx, "billing", seq, "stripe", "evt_1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("DeliveryStatus before any round: %v, want ErrNotFound", err)
	}

	next := start.Add(time.Minute)
	d := &Delivery{EventSeq: seq, Route: "billing", Source: "stripe", EventID: "evt_1", EventType: "invoice.paid", IdempotencyKey: "k",
		State: StateRetrying, Rounds: 1, LastStatus: 500, LastError: "Internal Server Error", NextAttemptAt: next}
	if err := s.RecordRound(ctx, d, []Attempt{att(500), att(500)}); err != nil {
		t.Fatal(err)
	}
	if d.ID == 0 || d.Attempts != 2 {
		t.Fatalf("after round 1: ID %d, Attempts %d; want an ID and 2", d.ID, d.Attempts)
	}
	st, err := s.DeliveryStatus(ctx, "billing", seq, "stripe", "evt_1")
	want := DeliveryStatus{ID: d.ID, State: StateRetrying, Attempts: 2, Rounds: 1, NextAttemptAt: next}
	if err != nil || st != want {
		t.Fatalf("DeliveryStatus = %+v, %v; want %+v", st, err, want)
	}

	id := d.ID
	d = &Delivery{EventSeq: seq, Route: "billing", Source: "stripe", EventID: "evt_1", IdempotencyKey: "k",
		State: StateSucceeded, Rounds: 1, LastStatus: 204}
	if err := s.RecordRound(ctx, d, []Attempt{att(204)}); err != nil {
		t.Fatal(err)
	}
	if d.ID != id || d.Attempts != 3 {
		t.Fatalf("after round 2: ID %d, Attempts %d; want %d and 3", d.ID, d.Attempts, id)
	}
	// A late round of a second copy does not undo the success.
	d = &Delivery{EventSeq: seq, Route: "billing", Source: "stripe", EventID: "evt_1", IdempotencyKey: "k",
		State: StateRetrying, Rounds: 2, LastStatus: 503, NextAttemptAt: next}
	if err := s.RecordRound(ctx, d, []Attempt{att(503)}); err != nil {
		t.Fatal(err)
	}
	full, err := s.Delivery(ctx, "billing", "stripe", "evt_1")
	if err != nil || full.State != StateSucceeded || full.Attempts != 4 || full.Rounds != 2 || full.LastStatus != 503 ||
		full.EventType != "invoice.paid" || full.EventSeq != seq {
		t.Fatalf("Delivery = %+v, %v; want succeeded with 4 attempts", full, err)
	}
	as, err := s.Attempts(ctx, id)
	if err != nil || len(as) != 4 {
		t.Fatalf("Attempts = %+v, %v; want 4", as, err)
	}
	for i, a := range as {
		if a.Attempt != i+1 || !a.StartedAt.Equal(start) || a.Duration != 3*time.Millisecond || string(a.Response) != "r" {
			t.Errorf("attempt %d = %+v", i, a)
		}
	}
	if as[3].Status != 503 || as[2].Status != 204 {
		t.Errorf("attempt statuses %d %d, want 204 503", as[2].Status, as[3].Status)
	}

	// A round without attempts (cut short) changes only the schedule.
	d = &Delivery{EventSeq: seq, Route: "other", Source: "stripe", EventID: "evt_1", IdempotencyKey: "k2", State: StatePending}
	if err := s.RecordRound(ctx, d, nil); err != nil || d.Attempts != 0 || d.ID == id {
		t.Fatalf("empty round: %+v, %v", d, err)
	}

	// A seq that is not the named event's here: none, or another's.
	if _, err := s.DeliveryStatus(ctx, "billing", seq+1, "stripe", "evt_1"); !errors.Is(err, ErrOtherEvent) {
		t.Fatalf("DeliveryStatus of a seq with no event: %v, want ErrOtherEvent", err)
	}
	for _, name := range [][2]string{{"stripe", "evt_2"}, {"github", "evt_1"}} {
		if _, err := s.DeliveryStatus(ctx, "billing", seq, name[0], name[1]); !errors.Is(err, ErrOtherEvent) {
			t.Fatalf("DeliveryStatus of seq %d as %s/%s: %v, want ErrOtherEvent", seq, name[0], name[1], err)
		}
	}
	// A round that does not say its event is refused.
	d = &Delivery{Route: "billing", Source: "stripe", EventID: "evt_1", IdempotencyKey: "k", State: StateSucceeded}
	if err := s.RecordRound(ctx, d, []Attempt{att(204)}); err == nil || errors.Is(err, ErrUnavailable) {
		t.Fatalf("RecordRound without EventSeq: %v, want a plain error", err)
	}
	if _, err := s.ResetDelivery(ctx, d, nil); err == nil || errors.Is(err, ErrUnavailable) {
		t.Fatalf("ResetDelivery without EventSeq: %v, want a plain error", err)
	}
}

// A store that refuses writes fails the round (and its whole batch) with
// ErrUnavailable; nothing is stored, and rounds work again after.
func TestRecordRoundUnwritable(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	if _, err := s.Claim(ctx, testEvent("evt_1")); err != nil { // seq 1
		t.Fatal(err)
	}
	if _, err := s.w.Exec("PRAGMA query_only = 1"); err != nil {
		t.Fatal(err)
	}
	d := &Delivery{EventSeq: 1, Route: "billing", Source: "stripe", EventID: "evt_1", IdempotencyKey: "k", State: StateSucceeded}
	if err := s.RecordRound(ctx, d, []Attempt{{StartedAt: time.Now(), Status: 200}}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("RecordRound on a read-only db: %v, want ErrUnavailable", err)
	}
	if _, err := s.w.Exec("PRAGMA query_only = 0"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeliveryStatus(ctx, "billing", 1, "stripe", "evt_1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("refused round was stored: %v", err)
	}
	if err := s.RecordRound(ctx, d, []Attempt{{StartedAt: time.Now(), Status: 200}}); err != nil || d.Attempts != 1 {
		t.Fatalf("RecordRound after recovery: %+v, %v", d, err)
	}
}

// The attempts walk goes past the recent attempts of an old delivery to
// the old attempts after them, and stops at deliveries created since the
// cutoff.
func TestPruneAttemptsPastRecentOnes(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	now := time.Now()
	old, recent := now.Add(-48*time.Hour), now.Add(-time.Hour)
	seed(t, s, []seedEvent{
		{id: "a", received: old, published: true, deliveries: map[string]string{"r": StateRetrying},
			attemptsAt: []time.Time{recent, recent, recent}},
		{id: "b", received: old, published: true, deliveries: map[string]string{"r": StateSucceeded},
			attemptsAt: []time.Time{old}},
		{id: "c", received: recent, published: true, deliveries: map[string]string{"r": StateSucceeded},
			attemptsAt: []time.Time{recent, recent, recent, recent}},
	})
	var total int
	var cur AttemptCursor
	writes := 0
	for {
		n, next, more, err := s.PruneAttempts(ctx, now.Add(-24*time.Hour), cur, 2)
		if err != nil {
			t.Fatal(err)
		}
		total, cur, writes = total+n, next, writes+1
		if !more {
			break
		}
	}
	if total != 1 || count(t, s, `SELECT count(*) FROM attempts`) != 7 {
		t.Fatalf("pruned %d attempts, %d left; want 1 and 7", total, count(t, s, `SELECT count(*) FROM attempts`))
	}
	// a's 3 (two writes), b's 1 with c's first, then c's created since the
	// cutoff: stop.
	if writes != 3 {
		t.Fatalf("the walk took %d writes, want 3", writes)
	}
}

// Every statement on deliveries and attempts is answered from an index:
// no full scan of either table, no temporary sort except where a page of
// an event's own deliveries is ordered, or a list page's deliveries of one
// millisecond by source, event ID and route.
func TestDeliveryQueryPlans(t *testing.T) {
	s := openTest(t, "")
	const unique = "sqlite_autoindex_deliveries_1"
	for _, c := range []struct {
		name, q string
		want    string // in the plan
	}{
		{"engine lookup: event", eventQuery, "SEARCH events USING INTEGER PRIMARY KEY (rowid=?)"},
		{"engine lookup: delivery", deliveryQuery, "SEARCH deliveries USING INDEX " + unique + " (event_seq=? AND route=?)"},
		{"Delivery", `SELECT * FROM deliveries WHERE event_seq = (SELECT seq FROM events WHERE source = ? AND event_id = ?)
			AND route = ?`, unique + " (event_seq=? AND route=?)"},
		{"DeliveryByID", `SELECT * FROM deliveries WHERE id = ?`, "INTEGER PRIMARY KEY (rowid=?)"},
		{"ListDeliveries by event", `SELECT * FROM deliveries WHERE created_at >= ? AND (created_at > ? OR (source, event_id, route) > (?, ?, ?))
			AND event_seq = (SELECT seq FROM events WHERE source = ? AND event_id = ?) ORDER BY created_at, source, event_id, route LIMIT ?`,
			unique + " (event_seq=?)"},
		{"ListDeliveries by state", `SELECT * FROM deliveries WHERE created_at >= ? AND (created_at > ? OR (source, event_id, route) > (?, ?, ?))
			AND state = ? AND state != 'succeeded' ORDER BY created_at, source, event_id, route LIMIT ?`, "deliveries_state (state=? AND created_at>?)"},
		{"ListDeliveries by state, first page", `SELECT * FROM deliveries WHERE created_at >= ? AND state = ? AND state != 'succeeded'
			ORDER BY created_at, source, event_id, route LIMIT ?`, "deliveries_state (state=? AND created_at>?)"},
		// Succeeded deliveries (most) are not in deliveries_state.
		{"ListDeliveries succeeded", `SELECT * FROM deliveries WHERE created_at >= ? AND (created_at > ? OR (source, event_id, route) > (?, ?, ?))
			AND state = ? ORDER BY created_at, source, event_id, route LIMIT ?`, "deliveries_created (created_at>?)"},
		// A source or an event ID alone walks the creation times, as a
		// route does.
		{"ListDeliveries by source", `SELECT * FROM deliveries WHERE created_at >= ? AND (created_at > ? OR (source, event_id, route) > (?, ?, ?))
			AND source = ? ORDER BY created_at, source, event_id, route LIMIT ?`, "deliveries_created (created_at>?)"},
		{"ListDeliveries by route", `SELECT * FROM deliveries WHERE created_at >= ? AND (created_at > ? OR (source, event_id, route) > (?, ?, ?))
			AND route = ? ORDER BY created_at, source, event_id, route LIMIT ?`, "deliveries_created (created_at>?)"},
		{"ListDeliveries by route, first page", `SELECT * FROM deliveries WHERE created_at >= ? AND route = ?
			ORDER BY created_at, source, event_id, route LIMIT ?`, "deliveries_created (created_at>?)"},
		{"ListDeliveries", `SELECT * FROM deliveries WHERE created_at >= ? AND (created_at > ? OR (source, event_id, route) > (?, ?, ?))
			ORDER BY created_at, source, event_id, route LIMIT ?`, "deliveries_created (created_at>?)"},
		{"ListDeliveries, first page", `SELECT * FROM deliveries WHERE created_at >= ?
			ORDER BY created_at, source, event_id, route LIMIT ?`, "deliveries_created (created_at>?)"},
		{"PublishedSince: deliveries", publishedSinceQuery("? < 0", 2), unique + " (event_seq=?)"},
		{"PublishedSince: unfinished", publishedSinceQuery("p.stream_seq > ?", 2), unique + " (event_seq=? AND route=?)"},
		{"PendingDeliveries", pendingDeliveriesQuery, "deliveries_state (state=?)"},
		{"retention: delivery states", `SELECT route, state FROM deliveries WHERE event_seq = ?`, unique + " (event_seq=?)"},
		{"retention: delete deliveries", `DELETE FROM deliveries WHERE event_seq = ?`, unique + " (event_seq=?)"},
		{"retention: delete attempts", `DELETE FROM attempts WHERE delivery_id IN
			(SELECT id FROM deliveries WHERE event_seq = ?)`, "PRIMARY KEY (delivery_id=?)"},
		{"SetDeliveryState", `UPDATE deliveries SET state = ? WHERE id = ? AND state != 'succeeded'`, "INTEGER PRIMARY KEY (rowid=?)"},
		{"Attempts", `SELECT attempt, started_at, duration_ms, status, error, response FROM attempts
			WHERE delivery_id = ? ORDER BY attempt`, "PRIMARY KEY (delivery_id=?)"},
		{"PruneAttempts: batch", `SELECT delivery_id, attempt FROM attempts WHERE (delivery_id, attempt) > (?, ?)
			ORDER BY delivery_id, attempt LIMIT ?`, "PRIMARY KEY ((delivery_id,attempt)>(?,?))"},
		{"PruneAttempts: delete", `DELETE FROM attempts WHERE (delivery_id, attempt) > (?, ?)
			AND (delivery_id, attempt) <= (?, ?) AND started_at < ?`, "PRIMARY KEY ((delivery_id,attempt)>(?,?) AND (delivery_id,attempt)<(?,?))"},
	} {
		plan := queryPlan(t, s, c.q)
		t.Logf("%s: %s", c.name, plan)
		if !strings.Contains(plan, c.want) {
			t.Errorf("%s: plan %q does not use %q", c.name, plan, c.want)
		}
		if strings.Contains(plan, "SCAN deliveries") || strings.Contains(plan, "SCAN d") || strings.Contains(plan, "SCAN attempts") {
			t.Errorf("%s: plan %q scans a table", c.name, plan)
		}
		// A list sorts the deliveries of one created_at (the last terms; a
		// source's: 2) only.
		if strings.Contains(plan, "TEMP B-TREE") && c.name != "ListDeliveries by event" &&
			!(strings.HasPrefix(c.name, "ListDeliveries") && (strings.Contains(plan, "TEMP B-TREE FOR LAST 3 TERMS OF ORDER BY") || strings.Contains(plan, "TEMP B-TREE FOR LAST 2 TERMS OF ORDER BY"))) {
			t.Errorf("%s: plan %q sorts", c.name, plan)
		}
	}
}

func queryPlan(t *testing.T, s *Store, q string) string {
	t.Helper()
	args := make([]any, strings.Count(q, "?"))
	for i := range args {
		args[i] = 1
	}
	rows, err := s.r.Query("EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	var steps []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		steps = append(steps, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(steps, "; ")
}

// Migrations 0006 and 0007 rebuild deliveries and attempts: every row
// keeps its values (delivery IDs included) and gains its event's seq (a
// delivery whose event is gone: -id), the keys and indexes are the new
// ones, foreign keys hold and still cascade.
func TestMigrateDeliveryTables(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite3", dsn(path, false))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	if err := migrateTo(context.Background(), db, 4); err != nil {
		t.Fatal(err)
	}
	// Deliveries with gaps in their IDs, attempts written out of key order,
	// one delivery whose event is gone.
	for _, q := range []string{
		`INSERT INTO events (seq, source, event_id, event_type, body, received_at) VALUES
			(21, 'stripe', 'evt_1', 'invoice.paid', x'', 1), (22, 'github', 'evt_1', 'push', x'', 2)`,
		`INSERT INTO deliveries (id, route, source, event_id, event_type, idempotency_key, state, attempts, rounds,
			last_status, last_error, next_attempt_at, created_at, updated_at) VALUES
			(3, 'billing', 'stripe', 'evt_1', 'invoice.paid', 'k1', 'succeeded', 2, 1, 204, '', NULL, 10, 20),
			(7, 'audit', 'stripe', 'evt_1', 'invoice.paid', 'k2', 'retrying', 1, 1, 500, 'boom', 99, 11, 21),
			(9, 'billing', 'github', 'evt_1', 'push', 'k3', 'pending', 0, 0, 0, '', NULL, 12, 22),
			(11, 'billing', 'stripe', 'evt_gone', 'invoice.paid', 'k4', 'dead', 1, 1, 500, '', NULL, 13, 23)`,
		`INSERT INTO attempts (id, delivery_id, attempt, started_at, duration_ms, status, error, response) VALUES
			(1, 3, 1, 100, 5, 500, 'Internal Server Error', x'6f6f7073'),
			(2, 7, 1, 101, 6, 500, '', NULL),
			(3, 3, 2, 102, 7, 204, '', x'')`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s := openTest(t, path)
	ctx := context.Background()
	var version int
	if err := s.r.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil || version < 7 {
		t.Fatalf("user_version = %d, %v; want at least 7", version, err)
	}
	d, err := s.Delivery(ctx, "audit", "stripe", "evt_1")
	if err != nil || d.ID != 7 || d.State != StateRetrying || d.Attempts != 1 || d.Rounds != 1 || d.LastStatus != 500 ||
		d.LastError != "boom" || d.NextAttemptAt.UnixMilli() != 99 || d.CreatedAt.UnixMilli() != 11 ||
		d.UpdatedAt.UnixMilli() != 21 || d.IdempotencyKey != "k2" || d.EventType != "invoice.paid" || d.EventSeq != 21 {
		t.Fatalf("migrated delivery = %+v, %v", d, err)
	}
	for id, want := range map[int64]int64{3: 21, 9: 22, 11: -11} {
		if d, err := s.DeliveryByID(ctx, id); err != nil || d.EventSeq != want {
			t.Errorf("delivery %d: event_seq %d, %v; want %d", id, d.EventSeq, err, want)
		}
	}
	as, err := s.Attempts(ctx, 3)
	if err != nil || len(as) != 2 || as[0].Attempt != 1 || as[0].Status != 500 || as[0].Error != "Internal Server Error" ||
		string(as[0].Response) != "oops" || as[0].Duration != 5*time.Millisecond || as[1].Attempt != 2 || as[1].Status != 204 {
		t.Fatalf("migrated attempts = %+v, %v", as, err)
	}
	if n := count(t, s, `SELECT count(*) FROM deliveries`); n != 4 {
		t.Fatalf("%d deliveries after migration, want 4", n)
	}
	if n := count(t, s, `SELECT count(*) FROM attempts`); n != 3 {
		t.Fatalf("%d attempts after migration, want 3", n)
	}

	var schema []string
	rows, err := s.r.Query(`SELECT name, coalesce(sql, '') FROM sqlite_schema WHERE tbl_name IN ('deliveries', 'attempts') ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name, q string
		if err := rows.Scan(&name, &q); err != nil {
			t.Fatal(err)
		}
		schema = append(schema, name)
		if name == "attempts" && (!strings.Contains(q, "WITHOUT ROWID") || !strings.Contains(q, `REFERENCES "deliveries"`)) {
			t.Errorf("attempts: %s", q)
		}
		if name == "deliveries" && !strings.Contains(q, "UNIQUE (event_seq, route)") {
			t.Errorf("deliveries: %s", q)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if got := strings.Join(schema, " "); got != "attempts deliveries deliveries_created deliveries_state sqlite_autoindex_deliveries_1" {
		t.Errorf("schema objects: %s", got)
	}
	var bad int
	if err := s.r.QueryRow(`SELECT count(*) FROM pragma_foreign_key_check`).Scan(&bad); err != nil || bad != 0 {
		t.Fatalf("foreign_key_check: %d rows, %v", bad, err)
	}
	var ok string
	if err := s.r.QueryRow(`PRAGMA integrity_check`).Scan(&ok); err != nil || ok != "ok" {
		t.Fatalf("integrity_check: %q, %v", ok, err)
	}

	// New rounds continue the numbering; a deleted delivery takes its
	// attempts along.
	nd := &Delivery{EventSeq: 21, Route: "audit", Source: "stripe", EventID: "evt_1", IdempotencyKey: "k2", State: StateSucceeded, Rounds: 1}
	if err := s.RecordRound(ctx, nd, []Attempt{{StartedAt: time.Now(), Status: 200}}); err != nil || nd.ID != 7 || nd.Attempts != 2 {
		t.Fatalf("round after migration: %+v, %v", nd, err)
	}
	err = s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`DELETE FROM deliveries WHERE id = 3`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := count(t, s, `SELECT count(*) FROM attempts WHERE delivery_id = 3`); n != 0 {
		t.Fatalf("%d attempts of a deleted delivery left: no cascade", n)
	}
	err = s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO attempts (delivery_id, attempt, started_at, duration_ms, status) VALUES (12345, 1, 0, 0, 0)`)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "FOREIGN KEY") {
		t.Fatalf("an attempt of no delivery: %v, want a foreign key error", err)
	}
	err = s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO attempts (delivery_id, attempt, started_at, duration_ms, status) VALUES (7, 1, 0, 0, 0)`)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "UNIQUE") {
		t.Fatalf("a repeated attempt number: %v, want a unique constraint error", err)
	}
}

// Lookups racing Close end: each is answered or told the store is
// unavailable, and Close waits for those running.
func TestDeliveryStatusDuringClose(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	if _, err := s.Claim(ctx, testEvent("evt_1")); err != nil { // seq 1
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				_, err := s.DeliveryStatus(ctx, "billing", 1, "stripe", "evt_1")
				if errors.Is(err, ErrNotFound) {
					continue
				}
				if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrClosed) {
					t.Errorf("DeliveryStatus: %v, want ErrNotFound or ErrUnavailable (closed)", err)
				}
				return
			}
		}()
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

// The writer answers lookups between commits: racing rounds being recorded,
// each lookup sees a delivery either not yet there or as committed, and
// lookups alone commit nothing (they are not writes).
func TestDeliveryStatusBesideWrites(t *testing.T) {
	var commits, writes atomic.Int64
	s, err := Open(context.Background(), Config{Path: filepath.Join(t.TempDir(), "db"), OnCommit: func(n int) {
		commits.Add(1)
		writes.Add(int64(n))
	}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()

	const n = 200
	for i := range n {
		if _, err := s.Claim(ctx, testEvent(fmt.Sprintf("evt_%d", i))); err != nil { // seq i+1
			t.Fatal(err)
		}
	}
	// OnCommit runs after the writer answered the batch's callers.
	gatewaytest.WaitFor(t, "the claims' commits counted", 5*time.Second, func() (bool, string) {
		return writes.Load() == n, fmt.Sprint(writes.Load(), " writes counted")
	})
	c0, w0 := commits.Load(), writes.Load()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(2)
		id, seq := fmt.Sprintf("evt_%d", i), int64(i+1)
		go func() {
			defer wg.Done()
			d := &Delivery{EventSeq: seq, Route: "billing", Source: "stripe", EventID: id, IdempotencyKey: "k",
				State: StateSucceeded, LastStatus: 204}
			if err := s.RecordRound(ctx, d, []Attempt{{StartedAt: time.Now(), Status: 204}}); err != nil {
				t.Error(err)
			}
		}()
		go func() {
			defer wg.Done()
			st, err := s.DeliveryStatus(ctx, "billing", seq, "stripe", id)
			switch {
			case errors.Is(err, ErrNotFound):
			case err != nil:
				t.Errorf("%s: %v", id, err)
			case st.State != StateSucceeded || st.Attempts != 1:
				t.Errorf("%s: state %q, %d attempts; want succeeded, 1", id, st.State, st.Attempts)
			}
		}()
	}
	wg.Wait()
	gatewaytest.WaitFor(t, "the rounds' commits counted", 5*time.Second, func() (bool, string) {
		return writes.Load()-w0 >= n, fmt.Sprint(writes.Load()-w0, " writes counted")
	})
	if got := writes.Load() - w0; got != n {
		t.Fatalf("commits counted %d writes, want %d (the rounds only)", got, n)
	}
	if commits.Load() == c0 {
		t.Fatal("no commit counted")
	}
	c := commits.Load()
	for i := range n {
		st, err := s.DeliveryStatus(ctx, "billing", int64(i+1), "stripe", fmt.Sprintf("evt_%d", i))
		if err != nil || st.State != StateSucceeded {
			t.Fatalf("evt_%d after its round: %+v %v, want succeeded", i, st, err)
		}
	}
	if got := commits.Load(); got != c {
		t.Fatalf("%d lookups made %d commits, want none", n, got-c)
	}
}

// A lookup queued with writes is answered before their transaction begins:
// it does not see a round whose batch then fails (a bad claim in the same
// batch fails it whole). The lookup is the writer's (queryStatus): from
// memory (fresh.go) it would not queue.
func TestDeliveryStatusIgnoresFailingBatch(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	if _, err := s.Claim(ctx, testEvent("evt_1")); err != nil { // seq 1
		t.Fatal(err)
	}
	hold, entered := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() { held <- s.write(ctx, func(*sql.Tx) error { close(entered); <-hold; return nil }) }()
	<-entered // the writer is busy: what follows queues up in this order
	queued := func(n int) {
		t.Helper()
		gatewaytest.WaitFor(t, fmt.Sprintf("%d ops queued", n), 5*time.Second, func() (bool, string) {
			return len(s.ops) == n, fmt.Sprintf("%d queued", len(s.ops))
		})
	}
	round, claim, lookup := make(chan error, 1), make(chan error, 1), make(chan error, 1)
	go func() {
		d := &Delivery{EventSeq: 1, Route: "billing", Source: "stripe", EventID: "evt_1", IdempotencyKey: "k", State: StateSucceeded}
		round <- s.RecordRound(ctx, d, []Attempt{{StartedAt: time.Now(), Status: 204}})
	}()
	queued(1)
	go func() {
		_, err := s.Claim(ctx, &Event{Source: "stripe", ID: "evt_bad", ReceivedAt: time.Now()}) // no body: NOT NULL fails
		claim <- err
	}()
	queued(2)
	go func() {
		_, err := s.queryStatus(ctx, "billing", 1, "stripe", "evt_1")
		lookup <- err
	}()
	queued(3)
	close(hold)
	if err := <-held; err != nil {
		t.Fatalf("held write: %v", err)
	}
	if err := <-claim; !errors.Is(err, ErrUnavailable) {
		t.Fatalf("claim without a body: %v, want ErrUnavailable", err)
	}
	if err := <-round; !errors.Is(err, ErrUnavailable) {
		t.Fatalf("round in the failed batch: %v, want ErrUnavailable", err)
	}
	if err := <-lookup; !errors.Is(err, ErrNotFound) {
		t.Fatalf("lookup queued with the failed batch: %v, want ErrNotFound (it must not see uncommitted writes)", err)
	}
	if _, err := s.DeliveryStatus(ctx, "billing", 1, "stripe", "evt_1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("lookup after the failed batch: %v, want ErrNotFound", err)
	}
}

// The engine's lookup before every round is compiled once. SQLite compiles
// a statement again at its next step when a parameter its plan looked at
// is bound anew, and go-sqlite3 clears every binding before each run, so a
// join with parameters would be compiled again on every lookup (the
// authorizer sees each compilation).
func TestDeliveryStatusCompiledOnce(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	for i := range 3 {
		ev := testEvent(fmt.Sprintf("evt_%d", i))
		if _, err := s.Claim(ctx, ev); err != nil {
			t.Fatal(err)
		}
		d := &Delivery{EventSeq: ev.Seq, Route: "billing", Source: "stripe", EventID: ev.ID, IdempotencyKey: "k",
			State: StateSucceeded, Rounds: 1, LastStatus: 204}
		if err := s.RecordRound(ctx, d, []Attempt{{StartedAt: time.Now(), Status: 204}}); err != nil {
			t.Fatal(err)
		}
	}
	var compiled atomic.Int64 // reads of a table authorized: one per column per compilation
	setAuthorizer := func(f func(int, string, string, string) int) {
		conn, err := s.w.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if err := conn.Raw(func(dc any) error {
			dc.(*sqlite3.SQLiteConn).RegisterAuthorizer(f)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	setAuthorizer(func(op int, table, _, _ string) int {
		if op == sqlite3.SQLITE_READ && (table == "events" || table == "deliveries") {
			compiled.Add(1)
		}
		return sqlite3.SQLITE_OK
	})
	defer setAuthorizer(nil)

	lookup := func(route string, seq int64, id string) {
		t.Helper()
		st, err := s.DeliveryStatus(ctx, route, seq, "stripe", id)
		switch {
		case route == "billing" && (err != nil || st.State != StateSucceeded):
			t.Fatalf("DeliveryStatus(%s, %d) = %+v, %v; want succeeded", route, seq, st, err)
		case route != "billing" && !errors.Is(err, ErrNotFound):
			t.Fatalf("DeliveryStatus(%s, %d) = %+v, %v; want ErrNotFound", route, seq, st, err)
		}
	}
	lookup("billing", 1, "evt_0") // a new authorizer expires every statement: compiled once here
	if compiled.Load() == 0 {
		t.Fatal("the authorizer saw no compilation of the lookup; the test cannot see one")
	}
	compiled.Store(0)
	for i := range 20 {
		seq := int64(i%3 + 1)
		lookup([]string{"billing", "audit"}[i%2], seq, fmt.Sprintf("evt_%d", seq-1))
	}
	if got := compiled.Load(); got != 0 {
		t.Errorf("20 lookups compiled their statements again (%d column reads authorized), want none", got)
	}
}
