package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// seed writes events (and deliveries, attempts) in one transaction.
type seedEvent struct {
	id, typ   string
	received  time.Time
	published bool
	// deliveries: route -> state; each delivery gets one attempt per entry
	// of attemptsAt.
	deliveries map[string]string
	attemptsAt []time.Time
}

func seed(t *testing.T, s *Store, evs []seedEvent) {
	t.Helper()
	err := s.write(context.Background(), func(tx *sql.Tx) error {
		for _, e := range evs {
			var seq int64
			if err := tx.QueryRow(`INSERT INTO events (source, event_id, event_type, body, received_at)
				VALUES ('stripe', ?, ?, ?, ?) RETURNING seq`, e.id, e.typ, []byte(`{"id":"`+e.id+`"}`),
				e.received.UnixMilli()).Scan(&seq); err != nil {
				return err
			}
			if _, err := tx.Exec(`INSERT INTO outbox (seq) VALUES (?)`, seq); err != nil { // as a claim does
				return err
			}
			if e.published {
				if err := publishInTx(tx, seq, e.received); err != nil {
					return err
				}
			}
			for route, state := range e.deliveries {
				var id int64
				if err := tx.QueryRow(`INSERT INTO deliveries (event_seq, route, source, event_id, event_type, idempotency_key,
					state, attempts, created_at, updated_at) VALUES (?, ?, 'stripe', ?, ?, 'k', ?, ?, ?, ?) RETURNING id`,
					seq, route, e.id, e.typ, state, len(e.attemptsAt), e.received.UnixMilli(), e.received.UnixMilli()).Scan(&id); err != nil {
					return err
				}
				for i, at := range e.attemptsAt {
					if _, err := tx.Exec(`INSERT INTO attempts (delivery_id, attempt, started_at, duration_ms, status)
						VALUES (?, ?, ?, 5, 500)`, id, i+1, at.UnixMilli()); err != nil {
						return err
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// publishInTx marks an event published as MarkPublished does, its stream
// sequence its seq.
func publishInTx(tx *sql.Tx, seq int64, at time.Time) error {
	if _, err := tx.Exec(`DELETE FROM outbox WHERE seq = ?`, seq); err != nil {
		return err
	}
	_, err := tx.Exec(`INSERT INTO published (seq, stream_seq, published_at) VALUES (?, ?, ?)`, seq, seq, at.UnixMilli())
	return err
}

func count(t *testing.T, s *Store, q string, args ...any) int {
	t.Helper()
	var n int
	if err := s.r.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Old finished events go with their deliveries and attempts, in many small
// writes, while intake keeps claiming: no claim fails, none waits long, and
// nothing recent, unpublished or unfinished is touched.
func TestPruneUnderConcurrentIntake(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	now := time.Now()
	old, oldAttempt, recent := now.Add(-48*time.Hour), now.Add(-36*time.Hour), now.Add(-time.Hour)

	const n = 3000
	var evs []seedEvent
	for i := 0; i < n; i++ {
		e := seedEvent{id: fmt.Sprintf("old_%d", i), typ: "invoice.paid", received: old.Add(time.Duration(i) * time.Millisecond), published: true}
		switch i % 5 {
		case 0: // matched no route
		case 1: // delivered
			e.deliveries = map[string]string{"billing": StateSucceeded, "audit": StateDead}
			e.attemptsAt = []time.Time{oldAttempt, oldAttempt}
		case 2: // still retrying: kept, but its old attempts go
			e.id = fmt.Sprintf("open_%d", i)
			e.deliveries = map[string]string{"billing": StateRetrying}
			e.attemptsAt = []time.Time{oldAttempt, recent}
		case 3: // still in the outbox: kept
			e.id = fmt.Sprintf("outbox_%d", i)
			e.published = false
		case 4: // a route the keep rule says has not finished: kept
			e.id = fmt.Sprintf("kept_%d", i)
			e.typ = "routed"
		}
		evs = append(evs, e)
	}
	for i := 0; i < 200; i++ {
		evs = append(evs, seedEvent{id: fmt.Sprintf("new_%d", i), typ: "invoice.paid", received: recent, published: true,
			deliveries: map[string]string{"billing": StateSucceeded}, attemptsAt: []time.Time{recent}})
	}
	seed(t, s, evs)

	var writes atomic.Int64
	p := NewPruner(s, PrunerConfig{
		Events: 24 * time.Hour, Attempts: 24 * time.Hour, Batch: 50, Pause: time.Millisecond,
		Keep:     func(ev *OldEvent) bool { return KeepOpen(ev) || ev.Type == "routed" },
		OnPruned: func(PruneResult) { writes.Add(1) },
	}, s.log)

	// Intake: claims keep coming from 8 goroutines while the pass runs.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var claims atomic.Int64
	var slowest atomic.Int64
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				ev := testEvent(fmt.Sprintf("live_%d_%d", w, i))
				if dup, err := s.Claim(ctx, ev); err != nil || dup {
					t.Errorf("claim during pruning: dup=%v err=%v", dup, err)
					return
				}
				claims.Add(1)
				if d := int64(time.Since(start)); d > slowest.Load() {
					slowest.Store(d)
				}
			}
		}()
	}
	time.Sleep(20 * time.Millisecond) // intake is running before the pass starts
	before := claims.Load()
	res, err := p.RunOnce(ctx)
	during := claims.Load() - before
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	t.Logf("pruned %+v in %d writes; %d claims during the pass, slowest %s", res, writes.Load(), during,
		time.Duration(slowest.Load()))

	// 600 unrouted + 600 delivered events; the delivered ones had 2
	// deliveries with 2 attempts each; 600 open deliveries lost 1 old attempt.
	want := PruneResult{Events: 1200, Deliveries: 1200, Attempts: 2400 + 600}
	if res != want {
		t.Fatalf("pruned %+v, want %+v", res, want)
	}
	if writes.Load() < 10 {
		t.Fatalf("the pass took %d writes; want small batches", writes.Load())
	}
	if during == 0 {
		t.Fatal("no claim committed while the pass ran")
	}
	if d := time.Duration(slowest.Load()); d > 2*time.Second {
		t.Fatalf("a claim waited %s during pruning", d)
	}

	if got := count(t, s, `SELECT count(*) FROM events WHERE event_id LIKE 'old_%'`); got != 0 {
		t.Errorf("%d old finished events left", got)
	}
	for prefix, want := range map[string]int{"open_": 600, "outbox_": 600, "kept_": 600, "new_": 200} {
		if got := count(t, s, `SELECT count(*) FROM events WHERE event_id LIKE ?`, prefix+"%"); got != want {
			t.Errorf("%s events: %d, want %d kept", prefix, got, want)
		}
	}
	if got, want := count(t, s, `SELECT count(*) FROM events WHERE event_id LIKE 'live_%'`), int(claims.Load()); got != want {
		t.Errorf("%d live events stored, %d claimed", got, want)
	}
	if got := count(t, s, `SELECT count(*) FROM deliveries WHERE event_id LIKE 'old_%'`); got != 0 {
		t.Errorf("%d deliveries of pruned events left", got)
	}
	if got := count(t, s, `SELECT count(*) FROM deliveries WHERE event_id LIKE 'open_%' OR event_id LIKE 'new_%'`); got != 800 {
		t.Errorf("%d deliveries of kept events, want 800", got)
	}
	if got := count(t, s, `SELECT count(*) FROM attempts`); got != 800 {
		t.Errorf("%d attempts left, want 800 (the recent ones)", got)
	}
	if got := count(t, s, `SELECT count(*) FROM attempts WHERE started_at < ?`, now.Add(-24*time.Hour).UnixMilli()); got != 0 {
		t.Errorf("%d attempts older than retention left", got)
	}
	if got, want := count(t, s, `SELECT count(*) FROM outbox`), 600+int(claims.Load()); got != want {
		t.Errorf("%d events in the outbox, want %d (outbox_ and live_)", got, want)
	}
	checkPublishState(t, s)

	// A second pass finds nothing more.
	if res, err := p.RunOnce(ctx); err != nil || res != (PruneResult{}) {
		t.Fatalf("second pass: %+v, %v; want nothing", res, err)
	}
}

// An operator's reset makes an old event unfinished again: it is kept.
func TestPruneSeesResetDelivery(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	old := time.Now().Add(-48 * time.Hour)
	seed(t, s, []seedEvent{{id: "evt_1", typ: "a", received: old, published: true,
		deliveries: map[string]string{"billing": StateSucceeded}}})
	ev, err := s.GetEvent(ctx, "stripe", "evt_1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ResetDelivery(ctx, &Delivery{EventSeq: ev.Seq, Route: "billing", Source: "stripe", EventID: "evt_1"}, nil); err != nil {
		t.Fatal(err)
	}
	res, _, more, err := s.PruneEvents(ctx, time.Now().Add(-time.Hour), EventCursor{}, 10, nil)
	if err != nil || res != (PruneResult{}) || more {
		t.Fatalf("PruneEvents = %+v more=%v %v; want nothing pruned", res, more, err)
	}
	d, err := s.Delivery(ctx, "billing", "stripe", "evt_1")
	if err != nil || d.State != StatePending || d.IdempotencyKey != "k" {
		t.Fatalf("delivery after reset = %+v, %v; want pending with its key kept", d, err)
	}
}

func TestPrunerStartStop(t *testing.T) {
	s := openTest(t, "")
	old := time.Now().Add(-48 * time.Hour)
	seed(t, s, []seedEvent{{id: "evt_1", received: old, published: true}, {id: "evt_2", received: time.Now()}})
	pruned := make(chan PruneResult, 1)
	p := NewPruner(s, PrunerConfig{Events: time.Hour, Attempts: time.Hour, Interval: time.Hour,
		OnPruned: func(r PruneResult) { pruned <- r }}, s.log)
	ctx := context.Background()
	if err := p.Stop(ctx); err != nil { // before Start: nothing to stop
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil { // already started
		t.Fatal(err)
	}
	select {
	case r := <-pruned:
		if r.Events != 1 {
			t.Fatalf("pruned %+v, want 1 event", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first pass did not run at Start")
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestListEventsPaging(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var evs []seedEvent
	for i := 0; i < 25; i++ {
		typ := "a"
		if i%2 == 1 {
			typ = "b"
		}
		// Pairs share a millisecond: the cursor must order by seq within it.
		evs = append(evs, seedEvent{id: fmt.Sprintf("evt_%02d", i), typ: typ, received: base.Add(time.Duration(i/2) * time.Second), published: true})
	}
	seed(t, s, evs)
	page := func(f EventFilter) []string {
		var ids []string
		for {
			got, err := s.ListEvents(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range got {
				ids = append(ids, e.EventID)
			}
			if len(got) < f.Limit {
				return ids
			}
			c := got[len(got)-1].Cursor()
			c2, err := ParseEventCursor(c.String())
			if err != nil || c2 != c {
				t.Fatalf("cursor %v does not round-trip: %v %v", c, c2, err)
			}
			f.After = &c2
		}
	}
	all := page(EventFilter{Limit: 4})
	if len(all) != 25 || all[0] != "evt_00" || all[24] != "evt_24" {
		t.Fatalf("paged %v", all)
	}
	for i := range all {
		if all[i] != fmt.Sprintf("evt_%02d", i) {
			t.Fatalf("order %v", all)
		}
	}
	if got := page(EventFilter{Type: "b", Limit: 3}); len(got) != 12 {
		t.Fatalf("type b: %v", got)
	}
	if got := page(EventFilter{Since: base.Add(10 * time.Second), Limit: 5}); len(got) != 5 || got[0] != "evt_20" {
		t.Fatalf("since: %v", got)
	}
	if got := page(EventFilter{Source: "github", Limit: 5}); len(got) != 0 {
		t.Fatalf("other source: %v", got)
	}
	for _, bad := range []string{"", "x", "1-", "-1-2", "1-x"} {
		if _, err := ParseEventCursor(bad); err == nil {
			t.Errorf("ParseEventCursor(%q) accepted", bad)
		}
	}
	if n, err := s.OutboxBacklog(ctx); err != nil || n != 0 {
		t.Fatalf("OutboxBacklog = %d, %v", n, err)
	}
}

// A task's record goes with its event.
func TestPruneTaskEvent(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	old := time.Now().Add(-48 * time.Hour)
	err := s.write(ctx, func(tx *sql.Tx) error {
		var seq int64
		if err := tx.QueryRow(`INSERT INTO events (source, event_id, event_type, body, received_at)
			VALUES (?, 'task_1', 'task', '{}', ?) RETURNING seq`, TaskSource, old.UnixMilli()).Scan(&seq); err != nil {
			return err
		}
		if err := publishInTx(tx, seq, old); err != nil {
			return err
		}
		_, err := tx.Exec(`INSERT INTO tasks (id, scope, created_at) VALUES ('task_1', 'scope', ?)`, old.UnixMilli())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	seed(t, s, []seedEvent{{id: "evt_new", received: time.Now()}}) // the newest event stays
	res, _, _, err := s.PruneEvents(ctx, time.Now().Add(-time.Hour), EventCursor{}, 10, nil)
	if err != nil || res.Events != 1 {
		t.Fatalf("PruneEvents = %+v, %v", res, err)
	}
	if _, err := s.TaskScope(ctx, "task_1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("task record after pruning: %v, want ErrNotFound", err)
	}
}

// The newest event is never pruned, so that its seq is never given to
// another event: deliveries are keyed by it.
func TestPruneKeepsNewestEvent(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	old := time.Now().Add(-48 * time.Hour)
	done := map[string]string{"billing": StateSucceeded}
	seed(t, s, []seedEvent{
		{id: "evt_1", received: old, published: true, deliveries: done},
		{id: "evt_2", received: old, published: true, deliveries: done},
	})
	second, err := s.GetEvent(ctx, "stripe", "evt_2")
	if err != nil {
		t.Fatal(err)
	}
	prune := func() PruneResult {
		t.Helper()
		res, _, _, err := s.PruneEvents(ctx, time.Now().Add(-time.Hour), EventCursor{}, 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := prune(); res.Events != 1 || res.Deliveries != 1 {
		t.Fatalf("pruned %+v, want evt_1 and its delivery", res)
	}
	if _, err := s.GetEvent(ctx, "stripe", "evt_2"); err != nil {
		t.Fatalf("the newest event: %v, want it kept", err)
	}
	ev := testEvent("evt_3")
	if _, err := s.Claim(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if ev.Seq <= second.Seq {
		t.Fatalf("new event's seq %d, want above %d", ev.Seq, second.Seq)
	}
	if res := prune(); res.Events != 1 {
		t.Fatalf("pruned %+v, want evt_2 now that it is not the newest", res)
	}
}

func TestPruneExpiredKeys(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	for i, ttl := range []time.Duration{-time.Second, -time.Second, time.Hour} {
		if out, _, err := s.ClaimKey(ctx, "scope", fmt.Sprintf("k%d", i), "fp", ttl, time.Minute); err != nil || out != KeyClaimed {
			t.Fatalf("ClaimKey: %v %v", out, err)
		}
	}
	p := NewPruner(s, PrunerConfig{Batch: 1}, nil)
	res, err := p.RunOnce(ctx)
	if err != nil || res.Keys != 2 {
		t.Fatalf("RunOnce = %+v, %v; want 2 keys pruned", res, err)
	}
	if out, _, _ := s.ClaimKey(ctx, "scope", "k2", "fp", time.Hour, time.Minute); out != KeyInFlight {
		t.Fatalf("the live key was pruned: %v", out)
	}
}
