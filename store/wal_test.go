package store

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Under writes and readers that never all stop at once, the WAL still
// starts again from its beginning once past WALRestartFrames: without a
// checkpoint that waits for the readers, it grows without bound.
func TestWALRestartsUnderConstantReads(t *testing.T) {
	const restartFrames = 200
	path := filepath.Join(t.TempDir(), "db")
	s, err := Open(context.Background(), Config{Path: path, WALRestartFrames: restartFrames}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// Two readers take turns so that one read transaction is always open
	// (each begins before the other ends), as under steady API reads.
	ctx, stop := context.WithCancel(context.Background())
	var readers sync.WaitGroup
	turn := []chan struct{}{make(chan struct{}, 1), make(chan struct{}, 1)}
	turn[0] <- struct{}{}
	for k := range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case <-turn[k]:
				}
				tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
				if err != nil {
					turn[1-k] <- struct{}{}
					return
				}
				var n int
				tx.QueryRow(`SELECT count(*) FROM events`).Scan(&n) // takes the snapshot
				turn[1-k] <- struct{}{}
				time.Sleep(time.Millisecond) // the other one begins meanwhile
				tx.Rollback()
			}
		}()
	}
	defer func() { stop(); readers.Wait() }()

	// frames is the WAL's size in frames, as another connection sees it.
	frames := func() int {
		var busy, log, copied int
		if err := s.ckpt.QueryRow("PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &log, &copied); err != nil {
			t.Fatal(err)
		}
		return log
	}
	// Writes never stop either.
	defer writeConstantly(t, s, 16)() // stops before the readers do

	most, restarted := 0, false
	deadline := time.Now().Add(10 * time.Second)
	for !restarted && time.Now().Before(deadline) {
		n := frames()
		restarted = most > 2*restartFrames && n < most/2
		most = max(most, n)
		time.Sleep(10 * time.Millisecond) // sampling, not waiting for a signal
	}
	if !restarted {
		t.Fatalf("the WAL never started again: %d frames at most, under constant reads", most)
	}
}

// Under writes that never pause, and no reader, the WAL starts again too:
// each checkpoint copies the WAL up to where it began while more commits
// come, so the WAL never empties by itself.
func TestWALRestartsUnderConstantWrites(t *testing.T) {
	const restartFrames = 200
	var reported atomic.Int64
	s := openWAL(t, Config{WALRestartFrames: restartFrames, OnWALRestart: func(time.Duration) { reported.Add(1) }})
	defer writeConstantly(t, s, 16)()
	deadline := time.Now().Add(10 * time.Second)
	for reported.Load() == 0 {
		if time.Now().After(deadline) {
			_, frames, _ := func() (int, int, error) { f, c, err := s.passive(); return c, f, err }()
			t.Fatalf("no WAL restart in 10s of constant writes; the WAL holds %d frames (limit %d)", frames, restartFrames)
		}
		time.Sleep(10 * time.Millisecond) // sampling, not waiting for a signal
	}
}

// Each restart is reported with how long it held up writes, also one
// that found a reader and gave up.
func TestWALRestartReported(t *testing.T) {
	var reported atomic.Int64
	s := openWAL(t, Config{WALRestartFrames: 20, OnWALRestart: func(took time.Duration) {
		if took > 0 {
			reported.Add(1)
		}
	}})
	// A reader's snapshot keeps the checkpointer from copying the WAL, as
	// under load, where more commits always follow.
	tx, err := s.r.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRow(`SELECT count(*) FROM events`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	body := []byte(strings.Repeat("x", 1024))
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; reported.Load() == 0; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("no restart reported after %d claims", i)
		}
		ev := &Event{Source: "s", ID: fmt.Sprintf("evt_%d", i), Body: body, ReceivedAt: time.Now()}
		if _, err := s.Claim(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
}

// Before asking for a restart, the checkpointer copies the WAL into the
// database file and fsyncs it, so that the restart has little left to
// write; an fsync that fails is reported.
func TestWriteBack(t *testing.T) {
	s := openWAL(t, Config{WALRestartFrames: 1 << 30}) // the checkpointer never calls writeBack itself
	claimN(t, s, 200)
	if err := s.writeBack(0); err != nil {
		t.Fatalf("writeBack: %v", err)
	}
	frames, copied, err := s.passive()
	if err != nil || frames == 0 || copied != frames {
		t.Fatalf("after writeBack: %d of %d frames copied (%v), want all", copied, frames, err)
	}

	// A file that cannot be synced (a closed one; not the database's own,
	// whose closing would drop SQLite's locks on it).
	closed, err := os.Create(filepath.Join(t.TempDir(), "closed"))
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	dbFile := s.dbFile
	s.dbFile = closed
	err = s.writeBack(0)
	s.dbFile = dbFile
	if err == nil || !strings.Contains(err.Error(), "fsync database") {
		t.Fatalf("writeBack on a closed file: %v, want the fsync's error", err)
	}
}

// Right after a RESTART, until the next commit, the WAL still reports its
// old size, all of it copied: that is no reason to restart it again.
func TestNoRestartTwice(t *testing.T) {
	s := openWAL(t, Config{WALRestartFrames: 1 << 30}) // the checkpointer never asks by itself
	claimN(t, s, 100)
	s.restartWAL() // as the writer would, between two commits
	frames, copied, err := s.passive()
	if err != nil || frames < 20 || copied != frames {
		t.Fatalf("after a restart: %d of %d frames copied (%v), want all of at least 20", copied, frames, err)
	}
	if err := s.checkpointAt(20); err != nil {
		t.Fatal(err)
	}
	if s.restartWanted.Load() {
		t.Fatal("a checkpoint right after a restart asked for another")
	}
}

// A restarted WAL is cut back to its restart size and an eighth, not
// further: cutting a 1 GiB WAL to 64 MiB would hold up the first commit
// after each restart.
func TestWALSizeLimit(t *testing.T) {
	for _, frames := range []int{0, 1000} {
		s, err := Open(context.Background(), Config{Path: filepath.Join(t.TempDir(), "db"), WALRestartFrames: frames},
			slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		var got int64
		if err := s.w.QueryRow("PRAGMA journal_size_limit").Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want := walBytes(s.walRestartFrames * 9 / 8); got != want {
			t.Errorf("WALRestartFrames %d: journal_size_limit = %d, want %d", frames, got, want)
		}
		s.Close()
	}
	if got, want := walBytes(1<<18), int64(1<<30+6<<20+32); got != want {
		t.Errorf("walBytes(1<<18) = %d, want %d", got, want)
	}
}

// The WAL's restart size defaults to 1 GiB: a restart holds up writes,
// for up to a few hundred ms on a large store with random event IDs, so it
// must be rare.
func TestWALRestartDefault(t *testing.T) {
	s := openTest(t, "")
	if got, want := s.walRestartFrames, 1<<18; got != want {
		t.Fatalf("walRestartFrames = %d, want %d (1 GiB of 4 KiB pages)", got, want)
	}
}

// openWAL opens a store on cfg (in a new directory unless cfg.Path is
// set), closed when the test ends.
func openWAL(t *testing.T, cfg Config) *Store {
	t.Helper()
	if cfg.Path == "" {
		cfg.Path = filepath.Join(t.TempDir(), "db")
	}
	s, err := Open(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// claimN claims n small events, one after another.
func claimN(t *testing.T, s *Store, n int) {
	t.Helper()
	for i := range n {
		if _, err := s.Claim(context.Background(), testEvent(fmt.Sprintf("evt_%d", i))); err != nil {
			t.Fatal(err)
		}
	}
}

// writeConstantly starts n writers claiming 1 KiB events back to back;
// the returned func stops them and waits for them.
func writeConstantly(t *testing.T, s *Store, n int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	body := []byte(strings.Repeat("x", 1024))
	var writers sync.WaitGroup
	for w := range n {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for i := 0; ctx.Err() == nil; i++ {
				ev := &Event{Source: "s", ID: fmt.Sprintf("evt_%d_%d", w, i), Body: body, ReceivedAt: time.Now()}
				if _, err := s.Claim(context.Background(), ev); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	return func() { cancel(); writers.Wait() }
}

// A large WAL found at open (a crash left it) is copied into the database
// before Open returns, not by the checkpointer while the store serves;
// nothing in it is lost.
func TestLargeWALCheckpointedAtOpen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "hookgate.db")
	s := openTest(t, path)
	body := bytes.Repeat([]byte("x"), 512<<10)
	for i := range 80 { // 40 MiB of WAL, more than openCheckpointBytes
		ev := testEvent(fmt.Sprintf("evt_%d", i))
		ev.Body = body
		if _, err := s.Claim(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	crash := copyCrashed(t, path) // the writer is idle
	var logs bytes.Buffer
	s2, err := Open(context.Background(), Config{Path: crash}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s2.Close() })
	if !strings.Contains(logs.String(), "copied into the database") {
		t.Fatalf("no checkpoint at open; logs:\n%s", logs.String())
	}
	for _, id := range []string{"evt_0", "evt_79"} {
		if ev, err := s2.GetEvent(context.Background(), "stripe", id); err != nil || len(ev.Body) != len(body) {
			t.Fatalf("%s after the checkpoint at open: %v", id, err)
		}
	}
}
