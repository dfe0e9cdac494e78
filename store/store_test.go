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
)

func openTest(t testing.TB, path string) *Store {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "hookgate.db")
	}
	s, err := Open(context.Background(), Config{Path: path}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func testEvent(id string) *Event {
	return &Event{Source: "stripe", ID: id, Type: "invoice.paid", ContentType: "application/json",
		Body: []byte(`{"id":"` + id + `"}`), ReceivedAt: time.Now()}
}

func TestClaimDedup(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	ev := testEvent("evt_1")
	dup, err := s.Claim(ctx, ev)
	if err != nil || dup {
		t.Fatalf("first claim: dup=%v err=%v, want false nil", dup, err)
	}
	if ev.Seq == 0 {
		t.Fatal("first claim: Seq not set")
	}
	dup, err = s.Claim(ctx, testEvent("evt_1"))
	if err != nil || !dup {
		t.Fatalf("second claim: dup=%v err=%v, want true nil", dup, err)
	}
	other := testEvent("evt_1")
	other.Source = "github"
	if dup, err := s.Claim(ctx, other); err != nil || dup {
		t.Fatalf("same id, other source: dup=%v err=%v, want false nil", dup, err)
	}
	total, unpub, err := s.Counts(ctx)
	if err != nil || total != 2 || unpub != 2 {
		t.Fatalf("Counts = %d, %d, %v; want 2, 2, nil", total, unpub, err)
	}
}

func TestConcurrentClaimsOneWinner(t *testing.T) {
	s := openTest(t, "")
	var wins, dups atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dup, err := s.Claim(context.Background(), testEvent("evt_same"))
			if err != nil {
				t.Errorf("Claim: %v", err)
				return
			}
			if dup {
				dups.Add(1)
			} else {
				wins.Add(1)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 || dups.Load() != 49 {
		t.Fatalf("wins=%d dups=%d, want 1 and 49", wins.Load(), dups.Load())
	}
}

// TestClaimSeqInBatch checks that each claim in a group commit, duplicates
// among them, is told the seq of its own row.
func TestClaimSeqInBatch(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	evs := make([]*Event, 200)
	dups := make([]bool, len(evs))
	var wg sync.WaitGroup
	for i := range evs {
		evs[i] = testEvent(fmt.Sprintf("evt_%d", i%150)) // the last 50 repeat earlier ones
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if dups[i], err = s.Claim(ctx, evs[i]); err != nil {
				t.Errorf("Claim: %v", err)
			}
		}()
	}
	wg.Wait()
	won := 0
	for i, ev := range evs {
		if dups[i] {
			continue
		}
		won++
		var want int64
		if err := s.r.QueryRow(`SELECT seq FROM events WHERE source = ? AND event_id = ?`, ev.Source, ev.ID).Scan(&want); err != nil {
			t.Fatal(err)
		}
		if ev.Seq != want {
			t.Errorf("%s: Seq = %d, want %d", ev.ID, ev.Seq, want)
		}
	}
	if won != 150 {
		t.Fatalf("%d claims won, want 150", won)
	}
}

func TestOutboxAndReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db.sqlite")
	s := openTest(t, path)
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		if _, err := s.Claim(ctx, testEvent(fmt.Sprintf("evt_%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := s.Unpublished(ctx, 0, 3)
	if err != nil || len(evs) != 3 {
		t.Fatalf("Unpublished = %d events, %v; want 3", len(evs), err)
	}
	if err := s.MarkPublished(ctx, []Published{{evs[0].Seq, 1}, {evs[1].Seq, 2}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("Stop after Close: %v", err)
	}
	if _, err := s.Claim(ctx, testEvent("late")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Claim after Close: %v, want ErrClosed", err)
	}

	s2 := openTest(t, path)
	evs, err = s2.Unpublished(ctx, 0, 100)
	if err != nil || len(evs) != 3 {
		t.Fatalf("after reopen Unpublished = %d, %v; want 3", len(evs), err)
	}
	if evs[0].ID != "evt_2" || string(evs[0].Body) != `{"id":"evt_2"}` || evs[0].Type != "invoice.paid" {
		t.Fatalf("got %+v", evs[0])
	}
	got, err := s2.GetEvent(ctx, "stripe", "evt_0")
	if err != nil || got.PublishedAt.IsZero() {
		t.Fatalf("GetEvent evt_0 = %+v, %v; want published", got, err)
	}
	if _, err := s2.GetEvent(ctx, "stripe", "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetEvent missing: %v, want ErrNotFound", err)
	}
}

// A database written by a newer build (a schema version beyond this
// build's migrations) is refused, not half understood.
func TestNewerSchemaRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db.sqlite")
	s := openTest(t, path)
	var version int
	if err := s.r.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, version+1)); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s2, err := Open(context.Background(), Config{Path: path}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil {
		s2.Close()
		t.Fatal("Open of a newer schema succeeded, want an error")
	}
	if want := fmt.Sprintf("schema version is %d, newer than this build's %d", version+1, version); !strings.Contains(err.Error(), want) {
		t.Fatalf("Open: %v, want it to say %q", err, want)
	}
}

func TestPragmas(t *testing.T) {
	s := openTest(t, "")
	var mode string
	var sync int
	if err := s.w.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v; want wal", mode, err)
	}
	if err := s.w.QueryRow("PRAGMA synchronous").Scan(&sync); err != nil || sync != 2 {
		t.Fatalf("synchronous = %d, %v; want 2 (FULL)", sync, err)
	}
}

// A database that refuses writes (query_only here; the fault suite uses a
// full disk) makes every claim fail with ErrUnavailable
// and stores nothing; writes work again once the disk does.
func TestUnwritableDatabase(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	if _, err := s.w.Exec("PRAGMA query_only = 1"); err != nil {
		t.Fatal(err)
	}
	_, err := s.Claim(ctx, testEvent("evt_ro"))
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Claim on read-only db: %v, want ErrUnavailable", err)
	}
	if _, err := s.w.Exec("PRAGMA query_only = 0"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetEvent(ctx, "stripe", "evt_ro"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("refused event was stored: %v", err)
	}
	if dup, err := s.Claim(ctx, testEvent("evt_ro")); err != nil || dup {
		t.Fatalf("Claim after recovery: dup=%v err=%v", dup, err)
	}
}

// BenchmarkClaim measures durable group-committed claims from many
// goroutines; batch/op reports the average group-commit size.
func BenchmarkClaim(b *testing.B) {
	var commits, writes atomic.Int64
	s, err := Open(context.Background(), Config{Path: filepath.Join(b.TempDir(), "b.db"),
		OnCommit: func(n int) { commits.Add(1); writes.Add(int64(n)) }},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	body := make([]byte, 1024)
	var n atomic.Int64
	b.SetParallelism(32)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ev := &Event{Source: "stripe", ID: fmt.Sprintf("evt_%d", n.Add(1)), Body: body, ReceivedAt: time.Now()}
			if _, err := s.Claim(context.Background(), ev); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	reportWrites(b, &commits, &writes)
}
