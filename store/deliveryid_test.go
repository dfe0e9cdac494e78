package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The derivation is the Idempotency-Key's: the same hex digits as the keys
// every stored delivery carries (values computed by the key's code).
func TestDerivedID(t *testing.T) {
	for _, c := range []struct{ route, source, id, key string }{
		{"billing", "stripe", "evt_1", "hg_aaa8abe84c2fc2f338aef570a8c4268c"},
		{"", "", "", "hg_63cab8e921e413242a44bf4e8fdc999d"},
	} {
		if got := DerivedID("hg_", c.route, c.source, c.id); got != c.key {
			t.Errorf("DerivedID(hg_, %q, %q, %q) = %s, want %s", c.route, c.source, c.id, got, c.key)
		}
		uid := DeliveryUID(c.route, c.source, c.id)
		if uid != "dl_"+c.key[3:] || !ValidUID(uid) {
			t.Errorf("DeliveryUID(%q, %q, %q) = %s, want dl_%s", c.route, c.source, c.id, uid, c.key[3:])
		}
	}
	// Parts are length-prefixed: moving a character between them changes
	// the ID.
	if DeliveryUID("ab", "c", "d") == DeliveryUID("a", "bc", "d") {
		t.Fatal("parts run together")
	}
	for _, bad := range []string{"", "dl_", "1780", "hg_aaa8abe84c2fc2f338aef570a8c4268c", "dl_AAA8ABE84C2FC2F338AEF570A8C4268C",
		"dl_aaa8abe84c2fc2f338aef570a8c4268", "dl_aaa8abe84c2fc2f338aef570a8c4268c0", "dl_row12"} {
		if ValidUID(bad) {
			t.Errorf("ValidUID(%q) = true", bad)
		}
	}
}

// Every insert of a delivery sets its uid, derived from (route, source,
// event ID) alone: two stores (two gateways) that stored the event under
// different seqs, and the delivery under different rowids, give it the
// same uid, and it finds the delivery in each.
func TestDeliveryUIDSetOnInsert(t *testing.T) {
	ctx := context.Background()
	a, b := openTest(t, ""), openTest(t, "")
	// b holds other events first: its seqs and rowids differ from a's.
	for i := range 3 {
		ev := testEvent(fmt.Sprintf("evt_other%d", i))
		if _, err := b.Claim(ctx, ev); err != nil {
			t.Fatal(err)
		}
		if err := b.RecordRound(ctx, &Delivery{EventSeq: ev.Seq, Route: "billing", Source: "stripe", EventID: ev.ID,
			IdempotencyKey: "k", State: StateSucceeded}, nil); err != nil {
			t.Fatal(err)
		}
	}
	want := DeliveryUID("billing", "stripe", "evt_1")
	var rowids []int64
	for _, s := range []*Store{a, b} {
		ev := testEvent("evt_1")
		if _, err := s.Claim(ctx, ev); err != nil {
			t.Fatal(err)
		}
		d := &Delivery{EventSeq: ev.Seq, Route: "billing", Source: "stripe", EventID: "evt_1", IdempotencyKey: "custom",
			State: StateRetrying}
		if err := s.RecordRound(ctx, d, []Attempt{{StartedAt: time.Now(), Status: 500}}); err != nil {
			t.Fatal(err)
		}
		if d.UID != want {
			t.Fatalf("RecordRound set UID %q, want %q", d.UID, want)
		}
		rowids = append(rowids, d.ID)
		// A later round (the upsert) keeps it.
		d = &Delivery{EventSeq: ev.Seq, Route: "billing", Source: "stripe", EventID: "evt_1", IdempotencyKey: "custom",
			State: StateDead}
		if err := s.RecordRound(ctx, d, nil); err != nil || d.UID != want {
			t.Fatalf("second round: UID %q, %v", d.UID, err)
		}
		got, err := s.DeliveryByUID(ctx, want)
		if err != nil || got.UID != want || got.ID != d.ID || got.State != StateDead || got.IdempotencyKey != "custom" {
			t.Fatalf("DeliveryByUID = %+v, %v", got, err)
		}
		// A replay's reset creates a delivery with its uid too.
		r, err := s.ResetDelivery(ctx, &Delivery{EventSeq: ev.Seq, Route: "audit", Source: "stripe", EventID: "evt_1",
			IdempotencyKey: "k"})
		if err != nil || r.UID != DeliveryUID("audit", "stripe", "evt_1") {
			t.Fatalf("ResetDelivery = %+v, %v", r, err)
		}
		if _, err := s.DeliveryByUID(ctx, DeliveryUID("billing", "stripe", "evt_2")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("DeliveryByUID of no delivery: %v, want ErrNotFound", err)
		}
	}
	if rowids[0] == rowids[1] {
		t.Fatalf("both stores gave the delivery row %d: the test shows nothing", rowids[0])
	}
	// The uid is unique: a second row with it is refused.
	err := a.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO deliveries (event_seq, route, source, event_id, idempotency_key, state,
			created_at, updated_at, uid) VALUES (999, 'x', 'stripe', 'evt_9', 'k', 'pending', 0, 0, ?)`, want)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "UNIQUE") {
		t.Fatalf("a second delivery with uid %s: %v, want a unique constraint error", want, err)
	}
}

// Migration 0011 gives every delivery of a store at schema 10 its uid
// from its Idempotency-Key (which carries the same digits), and a unique
// index; a row with a key of another form, or whose event was gone (0007
// kept it under -id) beside its event's later copy's, a uid of its rowid.
func TestMigrateDeliveryUIDs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite3", dsn(path, false))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	if err := migrateTo(context.Background(), db, 10); err != nil {
		t.Fatal(err)
	}
	key := func(route, id string) string { return DerivedID("hg_", route, "stripe", id) }
	for _, q := range []struct {
		q    string
		args []any
	}{
		{`INSERT INTO events (seq, source, event_id, event_type, body, received_at) VALUES
			(1, 'stripe', 'evt_1', 't', x'', 1), (2, 'stripe', 'evt_2', 't', x'', 2)`, nil},
		{`INSERT INTO deliveries (id, event_seq, route, source, event_id, idempotency_key, state, created_at, updated_at)
			VALUES (4, 1, 'billing', 'stripe', 'evt_1', ?, 'dead', 10, 20), (5, 1, 'audit', 'stripe', 'evt_1', ?, 'succeeded', 11, 21),
			(6, 2, 'billing', 'stripe', 'evt_2', ?, 'retrying', 12, 22), (7, 2, 'audit', 'stripe', 'evt_2', 'hg_XYZ', 'pending', 13, 23),
			(8, -8, 'billing', 'stripe', 'evt_2', ?, 'dead', 1, 2)`,
			[]any{key("billing", "evt_1"), key("audit", "evt_1"), key("billing", "evt_2"), key("billing", "evt_2")}},
	} {
		if _, err := db.Exec(q.q, q.args...); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s := openTest(t, path)
	ctx := context.Background()
	for id, want := range map[int64]string{
		4: DeliveryUID("billing", "stripe", "evt_1"), 5: DeliveryUID("audit", "stripe", "evt_1"),
		6: DeliveryUID("billing", "stripe", "evt_2"), 7: "dl_row7", 8: "dl_row8",
	} {
		d, err := s.DeliveryByID(ctx, id)
		if err != nil || d.UID != want {
			t.Errorf("delivery %d: uid %q, %v; want %q", id, d.UID, err, want)
			continue
		}
		if d2, err := s.DeliveryByUID(ctx, want); err != nil || d2.ID != id {
			t.Errorf("DeliveryByUID(%s) = %+v, %v; want row %d", want, d2, err, id)
		}
	}
	if n := count(t, s, `SELECT count(*) FROM sqlite_schema WHERE name = 'deliveries_uid' AND sql LIKE 'CREATE UNIQUE INDEX%'`); n != 1 {
		t.Fatalf("no unique index deliveries_uid")
	}
	// A round after the migration finds the row and keeps its uid.
	d := &Delivery{EventSeq: 2, Route: "audit", Source: "stripe", EventID: "evt_2", IdempotencyKey: "hg_XYZ", State: StateSucceeded}
	if err := s.RecordRound(ctx, d, nil); err != nil || d.ID != 7 {
		t.Fatalf("round after migration: %+v, %v", d, err)
	}
}

// Pages of deliveries follow (created_at, uid), the same order on every
// gateway: a cursor one store returned continues the list on another that
// holds the same deliveries under other rowids, with no delivery skipped
// or repeated, many of them created in the same millisecond. Filters page
// the same way.
func TestListDeliveriesPagingAcrossStores(t *testing.T) {
	ctx := context.Background()
	a, b := openTest(t, ""), openTest(t, "")
	type dl struct {
		route, id, state string
		created          int64
	}
	var all []dl
	base := time.Now().Add(-time.Hour).UnixMilli()
	for i := range 30 {
		state := StateSucceeded
		if i%3 == 0 {
			state = StateDead
		}
		for _, route := range []string{"billing", "audit"} {
			// Runs of 7 share a millisecond.
			all = append(all, dl{route, fmt.Sprintf("evt_%02d", i), state, base + int64(len(all)/7)})
		}
	}
	insert := func(s *Store, order []dl) {
		err := s.write(ctx, func(tx *sql.Tx) error {
			for _, d := range order {
				var seq int64
				err := tx.QueryRow(`INSERT INTO events (source, event_id, body, received_at) VALUES ('stripe', ?, x'', ?)
					ON CONFLICT DO UPDATE SET received_at = received_at RETURNING seq`, d.id, d.created).Scan(&seq)
				if err != nil {
					return err
				}
				if _, err := tx.Exec(`INSERT INTO deliveries (event_seq, route, source, event_id, idempotency_key, state,
					created_at, updated_at, uid) VALUES (?, ?, 'stripe', ?, 'k', ?, ?, ?, ?)`,
					seq, d.route, d.id, d.state, d.created, d.created, DeliveryUID(d.route, "stripe", d.id)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	insert(a, all)
	rev := slices.Clone(all)
	slices.Reverse(rev)
	insert(b, rev) // other rowids and seqs

	want := func(keep func(dl) bool) []string {
		var out []DeliveryCursor
		for _, d := range all {
			if keep(d) {
				out = append(out, DeliveryCursor{d.created, DeliveryUID(d.route, "stripe", d.id)})
			}
		}
		slices.SortFunc(out, func(x, y DeliveryCursor) int {
			if x.CreatedAt != y.CreatedAt {
				return int(x.CreatedAt - y.CreatedAt)
			}
			return strings.Compare(x.UID, y.UID)
		})
		uids := make([]string, len(out))
		for i, c := range out {
			uids[i] = c.UID
		}
		return uids
	}
	for _, c := range []struct {
		name string
		f    DeliveryFilter
		keep func(dl) bool
	}{
		{"all", DeliveryFilter{}, func(dl) bool { return true }},
		{"dead", DeliveryFilter{State: StateDead}, func(d dl) bool { return d.state == StateDead }},
		{"route", DeliveryFilter{Route: "audit"}, func(d dl) bool { return d.route == "audit" }},
		{"source", DeliveryFilter{Source: "stripe"}, func(dl) bool { return true }},
		{"event", DeliveryFilter{Source: "stripe", EventID: "evt_03"}, func(d dl) bool { return d.id == "evt_03" }},
	} {
		f := c.f
		f.Limit = 4
		var got []string
		for page := 0; ; page++ {
			s := []*Store{a, b}[page%2] // each page from the other gateway
			ds, err := s.ListDeliveries(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range ds {
				got = append(got, d.UID)
			}
			if len(ds) < f.Limit {
				break
			}
			cur, err := ParseDeliveryCursor(ds[len(ds)-1].Cursor().String())
			if err != nil || cur != ds[len(ds)-1].Cursor() {
				t.Fatalf("cursor %v does not round-trip: %v, %v", ds[len(ds)-1].Cursor(), cur, err)
			}
			f.After = &cur
		}
		if w := want(c.keep); !slices.Equal(got, w) {
			t.Errorf("%s: paged %d deliveries %v\nwant %d %v", c.name, len(got), got, len(w), w)
		}
	}
}

// Pages of events follow (received_at, source, event ID), the same order
// on every gateway: a cursor one store returned continues on another that
// stored the events in another order (other seqs).
func TestListEventsPagingAcrossStores(t *testing.T) {
	ctx := context.Background()
	a, b := openTest(t, ""), openTest(t, "")
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var evs []*Event
	for i := range 23 {
		src := []string{"stripe", "github"}[i%2]
		ev := &Event{Source: src, ID: fmt.Sprintf("evt_%02d", 22-i), Type: "t", Body: []byte("{}"),
			ReceivedAt: base.Add(time.Duration(i/5) * time.Millisecond)} // runs of 5 share a millisecond
		evs = append(evs, ev)
	}
	for _, ev := range evs {
		if _, err := a.Claim(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	for i := len(evs) - 1; i >= 0; i-- {
		ev := *evs[i]
		if _, err := b.Claim(ctx, &ev); err != nil {
			t.Fatal(err)
		}
	}
	var want []string
	sorted := slices.Clone(evs)
	slices.SortFunc(sorted, func(x, y *Event) int {
		if c := x.ReceivedAt.Compare(y.ReceivedAt); c != 0 {
			return c
		}
		if c := strings.Compare(x.Source, y.Source); c != 0 {
			return c
		}
		return strings.Compare(x.ID, y.ID)
	})
	for _, ev := range sorted {
		want = append(want, ev.Source+"/"+ev.ID)
	}
	f := EventFilter{Limit: 3}
	var got []string
	for page := 0; ; page++ {
		evs, err := []*Store{a, b}[page%2].ListEvents(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			got = append(got, e.Source+"/"+e.EventID)
		}
		if len(evs) < f.Limit {
			break
		}
		cur, err := ParseEventCursor(evs[len(evs)-1].Cursor().String())
		if err != nil {
			t.Fatal(err)
		}
		f.After = &cur
	}
	if !slices.Equal(got, want) {
		t.Fatalf("paged %v\nwant %v", got, want)
	}
}

// Cursors round-trip; a cursor of the earlier form (a row number; for
// events, time-seq) is ErrOldCursor, anything else ErrBadCursor.
func TestCursors(t *testing.T) {
	for _, c := range []DeliveryCursor{{0, DeliveryUID("", "", "")}, {1764130000123, DeliveryUID("r", "s", "e")}, {5, "dl_row7"}} {
		got, err := ParseDeliveryCursor(c.String())
		if err != nil || got != c {
			t.Errorf("delivery cursor %v: %v, %v", c, got, err)
		}
		if _, err := ParseEventCursor(c.String()); !errors.Is(err, ErrBadCursor) {
			t.Errorf("a delivery cursor read as an event's: %v", err)
		}
	}
	for _, c := range []EventListCursor{{}, {1764130000123, "stripe", "evt_1"}, {5, "a\x00b", "\xff/-?&"}} {
		got, err := ParseEventCursor(c.String())
		if err != nil || got != c {
			t.Errorf("event cursor %v: %v, %v", c, got, err)
		}
	}
	for _, old := range []string{"0", "1780", "99999999999999999999"} {
		if _, err := ParseDeliveryCursor(old); !errors.Is(err, ErrOldCursor) {
			t.Errorf("ParseDeliveryCursor(%q): %v, want ErrOldCursor", old, err)
		}
	}
	for _, old := range []string{"1764130000123-17", "5"} {
		if _, err := ParseEventCursor(old); !errors.Is(err, ErrOldCursor) {
			t.Errorf("ParseEventCursor(%q): %v, want ErrOldCursor", old, err)
		}
	}
	for _, bad := range []string{"", "x", "1-", "-1-2", "1-x", "1-2-3", "RA", "RA==", "R" + strings.Repeat("_", 20)} {
		if _, err := ParseDeliveryCursor(bad); !errors.Is(err, ErrBadCursor) && !errors.Is(err, ErrOldCursor) {
			t.Errorf("ParseDeliveryCursor(%q): %v", bad, err)
		}
		if _, err := ParseEventCursor(bad); !errors.Is(err, ErrBadCursor) && !errors.Is(err, ErrOldCursor) {
			t.Errorf("ParseEventCursor(%q): %v", bad, err)
		}
	}
}

// Cursors come from clients: any string is parsed without panic, and a
// parsed cursor encodes to one that parses to the same position.
func FuzzParseCursors(f *testing.F) {
	f.Add(DeliveryCursor{1764130000123, DeliveryUID("r", "s", "e")}.String())
	f.Add(EventListCursor{1764130000123, "stripe", "evt_1"}.String())
	f.Add("1780")
	f.Add("1764130000123-17")
	f.Fuzz(func(t *testing.T, s string) {
		if c, err := ParseDeliveryCursor(s); err == nil {
			if c2, err := ParseDeliveryCursor(c.String()); err != nil || c2 != c {
				t.Fatalf("delivery cursor %q: %v re-parsed as %v, %v", s, c, c2, err)
			}
		}
		if c, err := ParseEventCursor(s); err == nil {
			if c2, err := ParseEventCursor(c.String()); err != nil || c2 != c {
				t.Fatalf("event cursor %q: %v re-parsed as %v, %v", s, c, c2, err)
			}
		}
	})
}

// The events' list walks the receipt-time index from the cursor's time,
// sorting only the events of one millisecond by source and event ID.
func TestListEventsQueryPlan(t *testing.T) {
	s := openTest(t, "")
	for _, q := range []string{
		`SELECT e.seq FROM events e INDEXED BY events_received WHERE received_at >= ? AND (received_at > ? OR
			(source, event_id) > (?, ?)) AND +source = ? ORDER BY received_at, source, event_id LIMIT ?`,
		`SELECT e.seq FROM events e INDEXED BY events_received ORDER BY received_at, source, event_id LIMIT ?`,
	} {
		plan := queryPlan(t, s, q)
		if !strings.Contains(plan, "USING INDEX events_received") || !strings.Contains(plan, "TEMP B-TREE FOR LAST 2 TERMS OF ORDER BY") {
			t.Errorf("plan %q: want a walk of events_received sorting the last 2 terms only", plan)
		}
	}
}
