package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// checkPublishState fails unless every event is in exactly one of outbox
// and published, and neither holds a row of an event that is gone.
func checkPublishState(t *testing.T, s *Store) {
	t.Helper()
	for what, q := range map[string]string{
		"events in both or neither of outbox and published": `SELECT count(*) FROM events e
			WHERE EXISTS (SELECT 1 FROM outbox o WHERE o.seq = e.seq) = EXISTS (SELECT 1 FROM published p WHERE p.seq = e.seq)`,
		"outbox rows without an event":    `SELECT count(*) FROM outbox o WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.seq = o.seq)`,
		"published rows without an event": `SELECT count(*) FROM published p WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.seq = p.seq)`,
	} {
		if n := count(t, s, q); n != 0 {
			t.Errorf("%d %s", n, what)
		}
	}
}

func outboxSeqs(t *testing.T, s *Store) []int64 {
	t.Helper()
	rows, err := s.r.Query(`SELECT seq FROM outbox ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var seqs []int64
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return seqs
}

// publishedRow returns an event's row of the published table, ok false if it
// has none.
func publishedRow(t *testing.T, s *Store, seq int64) (streamSeq, at int64, ok bool) {
	t.Helper()
	err := s.r.QueryRow(`SELECT stream_seq, published_at FROM published WHERE seq = ?`, seq).Scan(&streamSeq, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return streamSeq, at, true
}

// A claim puts its event in the outbox; a duplicate claim, of an event in
// the outbox or of one already published, does not.
func TestClaimEntersOutbox(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	var seqs []int64
	for i := range 3 {
		ev := testEvent(fmt.Sprintf("evt_%d", i))
		if dup, err := s.Claim(ctx, ev); err != nil || dup {
			t.Fatalf("claim: dup=%v err=%v", dup, err)
		}
		seqs = append(seqs, ev.Seq)
	}
	if got := outboxSeqs(t, s); !slices.Equal(got, seqs) {
		t.Fatalf("outbox = %v, want %v", got, seqs)
	}
	if err := s.MarkPublished(ctx, []Published{{seqs[0], 7}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"evt_0", "evt_1"} { // published, and still in the outbox
		if dup, err := s.Claim(ctx, testEvent(id)); err != nil || !dup {
			t.Fatalf("repeat claim of %s: dup=%v err=%v", id, dup, err)
		}
	}
	if got := outboxSeqs(t, s); !slices.Equal(got, seqs[1:]) {
		t.Fatalf("outbox after repeats = %v, want %v", got, seqs[1:])
	}
	if n, err := s.OutboxBacklog(ctx); err != nil || n != 2 {
		t.Fatalf("OutboxBacklog = %d, %v; want 2", n, err)
	}
	checkPublishState(t, s)
}

// A claim's event and its outbox row commit together: when the outbox
// insert fails, the event is not stored either, and the claim fails as
// unavailable (the sender retries).
func TestClaimOutboxAtomic(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	first := testEvent("evt_0")
	if _, err := s.Claim(ctx, first); err != nil {
		t.Fatal(err)
	}
	// The next claim's seq is taken in the outbox, so its outbox insert
	// fails after its event insert succeeded.
	execWrite(t, s, `INSERT INTO outbox (seq) VALUES (?)`, first.Seq+1)
	if _, err := s.Claim(ctx, testEvent("evt_1")); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("claim with its outbox row taken: %v, want ErrUnavailable", err)
	}
	if _, err := s.GetEvent(ctx, "stripe", "evt_1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("event of the failed claim: %v, want ErrNotFound (rolled back)", err)
	}
	if n := count(t, s, `SELECT count(*) FROM events`); n != 1 {
		t.Errorf("%d events stored, want 1", n)
	}
}

// A task's event, its outbox row, its task row and its key's answer commit
// together: a failed outbox insert leaves none of them, and the key stays
// claimed for the request's retry.
func TestCreateTaskOutboxAtomic(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	if out, _, err := s.ClaimKey(ctx, "scope", "k1", "fp", time.Hour, time.Minute); err != nil || out != KeyClaimed {
		t.Fatalf("ClaimKey = %v, %v; want KeyClaimed", out, err)
	}
	first := testEvent("evt_0")
	if _, err := s.Claim(ctx, first); err != nil {
		t.Fatal(err)
	}
	execWrite(t, s, `INSERT INTO outbox (seq) VALUES (?)`, first.Seq+1) // the task event's seq-to-be
	task := func() *Event {
		return &Event{ID: "task_1", Type: "task", Body: []byte(`{}`), ReceivedAt: time.Now()}
	}
	if err := s.CreateTask(ctx, task(), "scope", "k1", 202, []byte(`{}`)); err == nil {
		t.Fatal("CreateTask with its outbox row taken succeeded, want an error")
	}
	for what, q := range map[string]string{
		"task events":   `SELECT count(*) FROM events WHERE source = '` + TaskSource + `'`,
		"task rows":     `SELECT count(*) FROM tasks`,
		"keys answered": `SELECT count(*) FROM idempotency_keys WHERE state != 'processing'`,
	} {
		if n := count(t, s, q); n != 0 {
			t.Errorf("%d %s after the failed CreateTask, want 0", n, what)
		}
	}
	execWrite(t, s, `DELETE FROM outbox WHERE seq = ?`, first.Seq+1)
	ev := task()
	if err := s.CreateTask(ctx, ev, "scope", "k1", 202, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if got := outboxSeqs(t, s); !slices.Equal(got, []int64{first.Seq, ev.Seq}) {
		t.Errorf("outbox = %v, want %v", got, []int64{first.Seq, ev.Seq})
	}
	checkPublishState(t, s)
}

// execWrite runs one statement as a write of its own.
func execWrite(t *testing.T, s *Store, q string, args ...any) {
	t.Helper()
	if err := s.write(context.Background(), func(tx *sql.Tx) error {
		_, err := tx.Exec(q, args...)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// Nothing but the writer's own statements writes on a claim: a trigger on
// events would make the claim a statement that writes two tables, for
// which SQLite copies every page it changes into a statement journal
// (migration 0008).
func TestNoTriggerOnEvents(t *testing.T) {
	s := openTest(t, "")
	if n := count(t, s, `SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = 'events'`); n != 0 {
		t.Errorf("%d triggers on events, want none", n)
	}
}

// MarkPublished moves events from the outbox to published, once; Requeue
// moves them back, and publishing them again records the new sequence.
func TestMarkPublishedRequeue(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	var seqs []int64
	for i := range 3 {
		ev := testEvent(fmt.Sprintf("evt_%d", i))
		if _, err := s.Claim(ctx, ev); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ev.Seq)
	}
	at := time.UnixMilli(1_700_000_000_000)
	if err := s.MarkPublished(ctx, []Published{{seqs[0], 10}, {seqs[1], 11}}, at); err != nil {
		t.Fatal(err)
	}
	evs, err := s.Unpublished(ctx, 0, 10)
	if err != nil || len(evs) != 1 || evs[0].Seq != seqs[2] || string(evs[0].Body) != `{"id":"evt_2"}` {
		t.Fatalf("Unpublished = %+v, %v; want evt_2 alone", evs, err)
	}
	if evs, err := s.Unpublished(ctx, seqs[2], 10); err != nil || len(evs) != 0 {
		t.Fatalf("Unpublished after the last = %+v, %v; want none", evs, err)
	}
	if ss, pa, ok := publishedRow(t, s, seqs[0]); !ok || ss != 10 || pa != at.UnixMilli() {
		t.Fatalf("published row = %d %d %v; want 10 %d", ss, pa, ok, at.UnixMilli())
	}
	if ev, err := s.GetEvent(ctx, "stripe", "evt_1"); err != nil || !ev.PublishedAt.Equal(at) {
		t.Fatalf("GetEvent = %+v, %v; want published at %v", ev, err, at)
	}
	if ev, err := s.GetEvent(ctx, "stripe", "evt_2"); err != nil || !ev.PublishedAt.IsZero() {
		t.Fatalf("GetEvent = %+v, %v; want unpublished", ev, err)
	}

	// Again, and for an event that does not exist: nothing changes.
	if err := s.MarkPublished(ctx, []Published{{seqs[0], 99}, {12345, 100}}, at.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if ss, pa, ok := publishedRow(t, s, seqs[0]); !ok || ss != 10 || pa != at.UnixMilli() {
		t.Fatalf("published row after a repeat = %d %d %v; want it unchanged", ss, pa, ok)
	}
	if _, _, ok := publishedRow(t, s, 12345); ok {
		t.Fatal("MarkPublished of a missing event recorded it")
	}

	since := func(min int64) []int64 {
		t.Helper()
		var got []int64
		if err := s.PublishedSince(ctx, min, stripeRoute, func(ev *Event, _ map[string]bool) error {
			got = append(got, ev.Seq)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := since(-1); !slices.Equal(got, seqs[:2]) {
		t.Fatalf("PublishedSince(-1) = %v, want %v", got, seqs[:2])
	}
	if got := since(10); !slices.Equal(got, seqs[1:2]) {
		t.Fatalf("PublishedSince(10) = %v, want %v", got, seqs[1:2])
	}

	// Requeue a published event, and one still in the outbox (no change).
	if err := s.Requeue(ctx, []int64{seqs[0], seqs[2]}, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := outboxSeqs(t, s), []int64{seqs[0], seqs[2]}; !slices.Equal(got, want) {
		t.Fatalf("outbox after Requeue = %v, want %v", got, want)
	}
	if _, _, ok := publishedRow(t, s, seqs[0]); ok {
		t.Fatal("a requeued event is still published")
	}
	if got := since(-1); !slices.Equal(got, seqs[1:2]) {
		t.Fatalf("PublishedSince(-1) after Requeue = %v, want %v", got, seqs[1:2])
	}
	if _, n, err := s.Counts(ctx); err != nil || n != 2 {
		t.Fatalf("Counts unpublished = %d, %v; want 2", n, err)
	}
	checkPublishState(t, s)

	if err := s.MarkPublished(ctx, []Published{{seqs[0], 12}}, at); err != nil {
		t.Fatal(err)
	}
	if ss, _, ok := publishedRow(t, s, seqs[0]); !ok || ss != 12 {
		t.Fatalf("republished stream_seq = %d %v, want 12", ss, ok)
	}
	checkPublishState(t, s)

	// An event both in the outbox and published (by hand: the store never
	// does it) is marked all the same, not failed forever.
	if err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO outbox (seq) VALUES (?)`, seqs[1])
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkPublished(ctx, []Published{{seqs[1], 13}}, at); err != nil {
		t.Fatalf("MarkPublished of an event in both tables: %v", err)
	}
	if ss, _, ok := publishedRow(t, s, seqs[1]); !ok || ss != 13 {
		t.Fatalf("stream_seq = %d %v, want 13", ss, ok)
	}
	checkPublishState(t, s)
}

// A database written before migration 0005 keeps its events' publish
// state: unpublished ones in the outbox, published ones with their stream
// sequence (0 where none was recorded) and time.
func TestMigrateOutbox(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite3", dsn(path, false))
	if err != nil {
		t.Fatal(err)
	}
	if err := migrateTo(context.Background(), db, 4); err != nil {
		t.Fatal(err)
	}
	old := []struct {
		id                   string
		publishedAt, streamS any
	}{
		{"evt_pub", int64(1000), int64(5)},
		{"evt_new", nil, nil},
		{"evt_pre0002", int64(2000), nil}, // published before stream sequences were kept
		{"evt_requeued", nil, nil},
		{"evt_pub2", int64(3000), int64(6)},
	}
	for i, e := range old {
		if _, err := db.Exec(`INSERT INTO events (seq, source, event_id, body, received_at, published_at, stream_seq)
			VALUES (?, 'stripe', ?, ?, 500, ?, ?)`, i+1, e.id, []byte(e.id), e.publishedAt, e.streamS); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s := openTest(t, path)
	ctx := context.Background()
	var version int
	if err := s.r.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil || version < 5 {
		t.Fatalf("user_version = %d, %v; want at least 5", version, err)
	}
	if got := outboxSeqs(t, s); !slices.Equal(got, []int64{2, 4}) {
		t.Fatalf("outbox = %v, want [2 4]", got)
	}
	for seq, want := range map[int64][2]int64{1: {5, 1000}, 3: {0, 2000}, 5: {6, 3000}} {
		if ss, pa, ok := publishedRow(t, s, seq); !ok || ss != want[0] || pa != want[1] {
			t.Errorf("published row of %d = %d %d %v; want %v", seq, ss, pa, ok, want)
		}
	}
	checkPublishState(t, s)
	if n := count(t, s, `SELECT count(*) FROM sqlite_schema WHERE name = 'events_outbox'`); n != 0 {
		t.Error("the events_outbox index is still there")
	}
	evs, err := s.Unpublished(ctx, 0, 10)
	if err != nil || len(evs) != 2 || evs[0].ID != "evt_new" || evs[1].ID != "evt_requeued" {
		t.Fatalf("Unpublished = %+v, %v", evs, err)
	}
	if ev, err := s.GetEvent(ctx, "stripe", "evt_pub"); err != nil || ev.PublishedAt.UnixMilli() != 1000 {
		t.Fatalf("GetEvent = %+v, %v; want published at 1000", ev, err)
	}
	// As before the migration: a stream that holds sequence 5 lost only
	// evt_pub2; a new stream lost all three.
	for min, want := range map[int64][]string{5: {"evt_pub2"}, -1: {"evt_pub", "evt_pre0002", "evt_pub2"}} {
		var got []string
		if err := s.PublishedSince(ctx, min, stripeRoute, func(ev *Event, _ map[string]bool) error {
			got = append(got, ev.ID)
			return nil
		}); err != nil || !slices.Equal(got, want) {
			t.Fatalf("PublishedSince(%d) = %v, %v; want %v", min, got, err, want)
		}
	}
	// New claims enter the outbox.
	ev := testEvent("evt_after")
	if _, err := s.Claim(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if got := outboxSeqs(t, s); !slices.Equal(got, []int64{2, 4, ev.Seq}) {
		t.Fatalf("outbox after a claim = %v", got)
	}
}

// Pruning an event removes its publish state; an event in the outbox stays.
func TestPruneRemovesPublishState(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	old := time.Now().Add(-48 * time.Hour)
	seed(t, s, []seedEvent{
		{id: "evt_done", received: old, published: true},
		{id: "evt_waiting", received: old},
	})
	res, _, _, err := s.PruneEvents(ctx, time.Now().Add(-time.Hour), EventCursor{}, 10, nil)
	if err != nil || res.Events != 1 {
		t.Fatalf("PruneEvents = %+v, %v; want 1 event", res, err)
	}
	if _, err := s.GetEvent(ctx, "stripe", "evt_waiting"); err != nil {
		t.Fatalf("event in the outbox: %v", err)
	}
	if n := count(t, s, `SELECT count(*) FROM published`); n != 0 {
		t.Errorf("%d published rows left", n)
	}
	if n := count(t, s, `SELECT count(*) FROM outbox`); n != 1 {
		t.Errorf("%d outbox rows, want 1", n)
	}
	checkPublishState(t, s)
}

// AdoptEvent stores the event of a message from elsewhere as published
// (not in the outbox, so the relay does not publish it again) and returns
// its seq; an event this store holds keeps its seq and row.
func TestAdoptEvent(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	local := testEvent("evt_local")
	if _, err := s.Claim(ctx, local); err != nil {
		t.Fatal(err)
	}
	foreign := &Event{Source: "stripe", ID: "evt_foreign", Type: "invoice.paid", ContentType: "application/json",
		Body: []byte(`{"id":"evt_foreign"}`)}
	seq, stored, err := s.AdoptEvent(ctx, foreign, 42)
	if err != nil || seq <= local.Seq || !stored {
		t.Fatalf("AdoptEvent = %d, %v, %v; want a new seq above %d, stored", seq, stored, err, local.Seq)
	}
	ev, err := s.GetEvent(ctx, "stripe", "evt_foreign")
	if err != nil || ev.Seq != seq || string(ev.Body) != `{"id":"evt_foreign"}` || ev.Type != "invoice.paid" ||
		ev.ContentType != "application/json" || string(ev.Headers) != "{}" || ev.PublishedAt.IsZero() ||
		time.Since(ev.ReceivedAt) > time.Minute {
		t.Fatalf("adopted event = %+v, %v", ev, err)
	}
	if streamSeq, _, ok := publishedRow(t, s, seq); !ok || streamSeq != 42 {
		t.Fatalf("published row: stream seq %d, %v; want 42", streamSeq, ok)
	}
	if got := outboxSeqs(t, s); !slices.Equal(got, []int64{local.Seq}) {
		t.Fatalf("outbox = %v, want only the claimed event %d", got, local.Seq)
	}
	checkPublishState(t, s)

	// Again, and an event claimed here: their seqs, nothing new stored.
	for _, c := range []struct {
		ev   *Event
		want int64
	}{{foreign, seq}, {&Event{Source: "stripe", ID: "evt_local", Body: []byte(`other`)}, local.Seq}} {
		if got, stored, err := s.AdoptEvent(ctx, c.ev, 99); err != nil || got != c.want || stored {
			t.Fatalf("AdoptEvent(%s) = %d, %v, %v; want %d, not stored", c.ev.ID, got, stored, err, c.want)
		}
	}
	if n := count(t, s, `SELECT count(*) FROM events`); n != 2 {
		t.Fatalf("%d events, want 2", n)
	}
	if ev, err := s.GetEvent(ctx, "stripe", "evt_local"); err != nil || string(ev.Body) != `{"id":"evt_local"}` {
		t.Fatalf("claimed event after AdoptEvent = %+v, %v; want it unchanged", ev, err)
	}
	if streamSeq, _, _ := publishedRow(t, s, seq); streamSeq != 42 {
		t.Fatalf("stream seq %d after a second AdoptEvent, want 42", streamSeq)
	}
	if _, err := s.DeliveryStatus(ctx, "billing", seq, "stripe", "evt_foreign"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("DeliveryStatus of the adopted event: %v, want ErrNotFound", err)
	}
}

// stripeRoute is one route taking every stripe event, for PublishedSince.
var stripeRoute = map[string]RouteTakes{"billing": {Sources: []string{"stripe"}}}

// PublishedSince hands over only the events some route takes from their
// source and has not finished, with the routes that have a delivery of
// it and whether that is terminal.
func TestPublishedSinceSkipsFinished(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	seq := map[string]int64{}
	var pubs []Published
	sources := map[string]string{"a_done": "stripe", "a_half": "stripe", "a_retrying": "stripe", "a_none": "stripe",
		"b_done": "github", "c_other": "other"}
	for id, source := range sources {
		ev := testEvent(id)
		ev.Source = source
		if _, err := s.Claim(ctx, ev); err != nil {
			t.Fatal(err)
		}
		seq[id] = ev.Seq
		pubs = append(pubs, Published{Seq: ev.Seq, StreamSeq: int64(len(pubs) + 1)})
	}
	if err := s.MarkPublished(ctx, pubs, time.Now()); err != nil {
		t.Fatal(err)
	}
	round := func(id, route, state string) {
		t.Helper()
		d := &Delivery{EventSeq: seq[id], Route: route, Source: sources[id], EventID: id, IdempotencyKey: "k", State: state}
		if err := s.RecordRound(ctx, d, []Attempt{{StartedAt: time.Now(), Status: 200}}); err != nil {
			t.Fatal(err)
		}
	}
	round("a_done", "billing", StateSucceeded)
	round("a_done", "audit", StateDead)
	round("a_half", "billing", StateSucceeded)
	round("a_retrying", "billing", StateRetrying)
	round("b_done", "audit", StateSucceeded) // billing does not take github

	routes := map[string]RouteTakes{"billing": {Sources: []string{"stripe"}}, "audit": {Sources: []string{"stripe", "github"}}, "idle": {}}
	got := map[string]map[string]bool{}
	err := s.PublishedSince(ctx, -1, routes, func(ev *Event, deliveries map[string]bool) error {
		got[ev.ID] = deliveries
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// a_done: both routes finished it; b_done: its one route did;
	// c_other: no route takes its source.
	want := map[string]map[string]bool{"a_half": {"billing": true}, "a_retrying": {"billing": false}, "a_none": {}}
	if len(got) != len(want) {
		t.Fatalf("PublishedSince handed over %v, want %v", got, want)
	}
	for id, w := range want {
		if g, ok := got[id]; !ok || !maps.Equal(g, w) {
			t.Errorf("%s: handed over %v with deliveries %v, want %v", id, ok, g, w)
		}
	}
	if err := s.PublishedSince(ctx, -1, nil, func(ev *Event, _ map[string]bool) error {
		t.Errorf("no routes: %s handed over", ev.ID)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Thousands of routes: every stripe event is unfinished on them.
	many := map[string]RouteTakes{}
	for i := range 3000 {
		many[fmt.Sprintf("r%d", i)] = RouteTakes{Sources: []string{"stripe"}}
	}
	n := 0
	if err := s.PublishedSince(ctx, -1, many, func(*Event, map[string]bool) error { n++; return nil }); err != nil || n != 4 {
		t.Fatalf("3,000 routes: %d events handed over (%v), want the 4 stripe ones", n, err)
	}
}

// A route's since leaves out the events received before it that the
// route has no delivery of; one it has an open delivery of is still
// handed over, and a route from the start (since 0) takes every event.
func TestPublishedSinceRouteAddedLater(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	added := time.Now().Add(-time.Hour)
	before, after := added.Add(-time.Minute), added.Add(time.Minute)
	seed(t, s, []seedEvent{
		{id: "old_none", received: before, published: true},
		{id: "old_open", received: before, published: true, deliveries: map[string]string{"late": StateRetrying}},
		{id: "old_done", received: before, published: true, deliveries: map[string]string{"late": StateSucceeded}},
		{id: "at_since", received: added, published: true},
		{id: "new_none", received: after, published: true},
	})
	for _, c := range []struct {
		name   string
		routes map[string]RouteTakes
		want   []string
	}{
		{"added later", map[string]RouteTakes{"late": {Sources: []string{"stripe"}, Since: added.UnixMilli()}},
			[]string{"old_open", "at_since", "new_none"}},
		{"from the start", map[string]RouteTakes{"late": {Sources: []string{"stripe"}}},
			[]string{"old_none", "old_open", "at_since", "new_none"}},
		{"another route from the start", map[string]RouteTakes{
			"late":  {Sources: []string{"stripe"}, Since: added.UnixMilli()},
			"first": {Sources: []string{"stripe"}}},
			[]string{"old_none", "old_open", "old_done", "at_since", "new_none"}},
	} {
		var got []string
		err := s.PublishedSince(ctx, -1, c.routes, func(ev *Event, _ map[string]bool) error {
			got = append(got, ev.ID)
			return nil
		})
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s: handed over %v (%v), want %v", c.name, got, err, c.want)
		}
	}
}

// DropTask undoes a task another gateway holds for another request: the
// key's answer is forgotten, and the task's event, outbox entry and owner
// go, unless a record of the holder's replaced the request stored here.
func TestDropTask(t *testing.T) {
	ctx := context.Background()
	digest := func(body string) string {
		sum := sha256.Sum256([]byte(body))
		return hex.EncodeToString(sum[:])
	}
	for _, tc := range []struct {
		name     string
		replaced bool // a record of the holder's came first
	}{{"still ours", false}, {"the holder's record came first", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTest(t, "")
			if _, _, err := s.ClaimKey(ctx, "scope", "k1", "fp", time.Hour, time.Minute); err != nil {
				t.Fatal(err)
			}
			ev := &Event{ID: "task_1", Type: "task", Body: []byte(`{"url":"ours"}`), ReceivedAt: time.Now()}
			if err := s.CreateTask(ctx, ev, "scope", "k1", 202, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			if tc.replaced {
				rec := &EventRecord{Origin: "gw1", Source: TaskSource, ID: "task_1", Type: "task", ReceivedAt: 1234,
					Scope: "scope", Body: []byte(`{"url":"theirs"}`)}
				if err := s.ApplyRecords(ctx, []Record{{Event: rec}}, 1); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.DropTask(ctx, "task_1", "scope", "k1", digest(`{"url":"ours"}`)); err != nil {
				t.Fatal(err)
			}
			if out, _, err := s.ClaimKey(ctx, "scope", "k1", "fp", time.Hour, time.Minute); err != nil || out != KeyClaimed {
				t.Errorf("the key after DropTask: %v, %v; want KeyClaimed", out, err)
			}
			got, err := s.GetEvent(ctx, TaskSource, "task_1")
			switch {
			case tc.replaced && (err != nil || string(got.Body) != `{"url":"theirs"}`):
				t.Errorf("the holder's task: %+v, %v; want it kept", got, err)
			case !tc.replaced && !errors.Is(err, ErrNotFound):
				t.Errorf("our task after DropTask: %+v, %v; want ErrNotFound", got, err)
			}
			want := 1
			if !tc.replaced {
				want = 0
			}
			if n := count(t, s, `SELECT count(*) FROM tasks`); n != want {
				t.Errorf("%d task owners, want %d", n, want)
			}
			if n := len(outboxSeqs(t, s)); n != want {
				t.Errorf("%d in the outbox, want %d", n, want)
			}
		})
	}
}

// PendingDeliveries tells a delivery an operator set pending (a retry, a
// replay) from one a round left pending (cut short by a stop).
func TestPendingDeliveriesTellsOperatorsResets(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "")
	ev := testEvent("evt_p")
	if _, err := s.Claim(ctx, ev); err != nil {
		t.Fatal(err)
	}
	record := func(route, state string) *Delivery {
		t.Helper()
		d := &Delivery{EventSeq: ev.Seq, Route: route, Source: ev.Source, EventID: ev.ID, IdempotencyKey: "k-" + route, State: state}
		if err := s.RecordRound(ctx, d, []Attempt{{StartedAt: time.Now(), Status: 500}}); err != nil {
			t.Fatal(err)
		}
		return d
	}
	record("cut", StatePending) // a first round cut short by a stop
	if _, err := s.SetDeliveryState(ctx, record("retried", StateDead).ID, StatePending); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ResetDelivery(ctx, &Delivery{EventSeq: ev.Seq, Route: "replayed", Source: ev.Source, EventID: ev.ID,
		IdempotencyKey: "k-replayed"}, nil); err != nil {
		t.Fatal(err)
	}
	// A retry whose round was then cut short stays the operator's.
	record("retried", StatePending)
	// A replay's new delivery whose round failed, its event not requeued
	// anew yet, is the operator's; a delivery retrying on its schedule is
	// its message's.
	if _, err := s.ResetDelivery(ctx, &Delivery{EventSeq: ev.Seq, Route: "new", Source: ev.Source, EventID: ev.ID,
		IdempotencyKey: "k-new"}, nil); err != nil {
		t.Fatal(err)
	}
	record("new", StateRetrying)
	record("scheduled", StateRetrying)
	got := map[string]bool{}
	if err := s.PendingDeliveries(ctx, func(seq int64, route, _, _ string, reset bool) error {
		if seq != ev.Seq {
			t.Errorf("%s: seq %d, want %d", route, seq, ev.Seq)
		}
		got[route] = reset
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := map[string]bool{"cut": false, "new": true, "retried": true, "replayed": true}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("pending deliveries (route: reset) %v, want %v", got, want)
	}
}
