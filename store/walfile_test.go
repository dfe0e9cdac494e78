package store

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

func TestZeroFill(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name           string
		have, size     int64
		wantAdded      int64
		wantFinalBytes int64
	}{
		{"empty to two pages and a half", 0, fillChunk * 5 / 2, fillChunk * 5 / 2, fillChunk * 5 / 2},
		{"partial to 1 MiB", 100, 1 << 20, 1<<20 - 100, 1 << 20},
		{"already that size", 4096, 4096, 0, 4096},
		{"larger is left alone", 8192, 4096, 0, 8192},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "f")
			old := bytes.Repeat([]byte{0xa5}, int(c.have))
			if err := os.WriteFile(path, old, 0o600); err != nil {
				t.Fatal(err)
			}
			added, err := zeroFill(path, c.size)
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if added != c.wantAdded || int64(len(got)) != c.wantFinalBytes {
				t.Fatalf("added %d, size %d; want %d, %d", added, len(got), c.wantAdded, c.wantFinalBytes)
			}
			if !bytes.Equal(got[:c.have], old) {
				t.Error("the file's content changed")
			}
			if bytes.ContainsFunc(got[c.have:], func(r rune) bool { return r != 0 }) {
				t.Error("the fill is not zeros")
			}
		})
	}
}

// A commit into the filled file writes what it changed, not the large
// folios a fill in big writes would have made of the file's page cache.
// Not parallel: write_bytes is the whole process's.
func TestZeroFillSmallPages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wal")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := zeroFill(path, 16<<20); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	before := gatewaytest.IOCounter("write_bytes") // counted as pages are dirtied
	if before < 0 {
		t.Skip("no write_bytes in /proc/self/io")
	}
	const commits, frames = 40, 5
	page := make([]byte, 4096)
	off := int64(32)
	for range commits { // as SQLite writes a commit: per frame, its header, then its page
		for range frames {
			if _, err := f.WriteAt(page[:24], off); err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(page, off+24); err != nil {
				t.Fatal(err)
			}
			off += 24 + 4096
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	written := gatewaytest.IOCounter("write_bytes") - before
	if written == 0 {
		t.Skip("write_bytes does not count this filesystem's writes (tmpfs, say)")
	}
	perCommit := written / commits
	if perCommit > 64<<10 {
		t.Errorf("a commit of %d frames wrote %d KiB, want about %d", frames, perCommit>>10, frames*4120>>10)
	}
}

// A fill the disk has no room for is cut back: it takes no space the
// database needs.
func TestZeroFillUndoneWhenFull(t *testing.T) {
	t.Parallel()
	mnt := t.TempDir()
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=4m"); err != nil {
		t.Skipf("cannot mount a tmpfs (needs root or CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(mnt, syscall.MNT_DETACH) })
	path := filepath.Join(mnt, "f")
	if err := os.WriteFile(path, []byte("frames"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := zeroFill(path, 16<<20); err == nil {
		t.Fatal("a fill past the disk's size succeeded")
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 6 {
		t.Fatalf("after the failed fill: %v, %v; want the file's 6 bytes", fi, err)
	}
}

func TestPrefetchRanges(t *testing.T) {
	t.Parallel()
	size := walBytes(1 << 18) // 1 GiB
	cases := []struct {
		name            string
		frames          int
		size            int64
		off, n, wrapped int64
	}{
		{"empty WAL: its beginning", 0, size, 0, prefetchAhead, 0},
		{"mid-file: ahead of the last frame", 1000, size, walBytes(1000), prefetchAhead, 0},
		{"near the end: the rest, then the beginning", 1<<18 - 100, size, walBytes(1<<18 - 100), 100 * 4120, prefetchAhead - 100*4120},
		{"at the end: the beginning", 1 << 18, size, 0, 0, prefetchAhead},
		{"a small file: what is ahead, then what is behind", 10, walBytes(100), walBytes(10), walBytes(100) - walBytes(10), walBytes(10)},
		{"no file", 0, 0, 0, 0, 0},
	}
	for _, c := range cases {
		off, n, wrapped := prefetchRanges(c.frames, c.size)
		if off != c.off || n != c.n || wrapped != c.wrapped {
			t.Errorf("%s: got %d, %d, %d; want %d, %d, %d", c.name, off, n, wrapped, c.off, c.n, c.wrapped)
		}
	}
}

// openFilled opens a store with a zero-filled WAL of restartFrames frames
// at path, logging to logs; the test is skipped where the fill would be
// (a filesystem where it does not pay).
func openFilled(t *testing.T, path string, restartFrames int, logs io.Writer, onRestart func(time.Duration)) *Store {
	t.Helper()
	if ok, fs := fillsPay(filepath.Dir(path)); !ok {
		t.Skipf("the WAL is not zero-filled on %s", fs)
	}
	s, err := Open(context.Background(), Config{Path: path, WALRestartFrames: restartFrames, WALZeroFill: true,
		OnWALRestart: onRestart}, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// walSize is the size of the WAL file of the database at path.
func walSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatalf("the WAL file: %v", err)
	}
	return fi.Size()
}

// copyCrashed copies the database at path and its WAL (not its index,
// which the next open rebuilds from the WAL) as a crash would leave them,
// and returns the copy's path. The store must be idle.
func copyCrashed(t *testing.T, path string) string {
	t.Helper()
	crash := filepath.Join(t.TempDir(), "hookgate.db")
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(path + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(crash+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return crash
}

// validFrames is the number of frames the next open of the database at
// path finds valid in its WAL (its recovery), probed on a copy.
func validFrames(t *testing.T, path string) int {
	t.Helper()
	db, err := sql.Open("sqlite3", dsn(copyCrashed(t, path), false))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var busy, frames, copied int
	if err := db.QueryRow("PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied); err != nil {
		t.Fatal(err)
	}
	return frames
}

// The WAL is filled at open to the size it is kept at, and Close leaves
// it in place with its frames made invalid: the next start neither fills
// it again nor reads the last run's frames, and nothing is lost. The kept
// file is over openCheckpointBytes, so the reopen also takes the path of
// a kept 1 GiB WAL (a RESTART checkpoint at open).
func TestWALKeptAcrossClose(t *testing.T) {
	t.Parallel()
	const restartFrames = 8192
	path := filepath.Join(t.TempDir(), "hookgate.db")
	var logs bytes.Buffer
	s := openFilled(t, path, restartFrames, &logs, nil)
	if got, want := walSize(t, path), walKeptBytes(restartFrames); got != want || want < openCheckpointBytes {
		t.Fatalf("WAL after Open: %d bytes, want %d (at least %d)", got, want, openCheckpointBytes)
	}
	if !strings.Contains(logs.String(), "WAL zero-filled") {
		t.Errorf("no fill logged:\n%s", logs.String())
	}
	claimN(t, s, 300)
	if n := validFrames(t, path); n < 50 {
		t.Fatalf("only %d frames in the WAL before Close; the test needs more", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := walSize(t, path), walKeptBytes(restartFrames); got != want {
		t.Fatalf("WAL after Close: %d bytes, want %d", got, want)
	}
	if n := validFrames(t, path); n > 2 {
		t.Errorf("the next open finds %d frames of the last run in the WAL, want at most 2", n)
	}

	logs.Reset()
	s2 := openFilled(t, path, restartFrames, &logs, nil)
	if strings.Contains(logs.String(), "WAL zero-filled") {
		t.Errorf("the kept WAL was filled again:\n%s", logs.String())
	}
	for _, id := range []string{"evt_0", "evt_299"} {
		if dup, err := s2.Claim(context.Background(), testEvent(id)); err != nil || !dup {
			t.Errorf("claim %s after reopening: duplicate %v, %v; want a duplicate", id, dup, err)
		}
	}
	if got, want := walSize(t, path), walKeptBytes(restartFrames); got != want {
		t.Errorf("WAL after reopening: %d bytes, want %d", got, want)
	}
}

// A crash while the WAL is being overwritten (after restarts, frames of
// the current cycle in front of older cycles' and of zeros) loses no
// committed event, also when the next start fills the WAL further while
// the crash's frames are still in it (a WAL under openCheckpointBytes is
// not copied into the database at open).
func TestZeroFilledWALAfterCrash(t *testing.T) {
	t.Parallel()
	const restartFrames = 64
	path := filepath.Join(t.TempDir(), "hookgate.db")
	var restarts atomic.Int64
	s := openFilled(t, path, restartFrames, io.Discard, func(time.Duration) { restarts.Add(1) })
	stop := writeConstantly(t, s, 8)
	deadline := time.Now().Add(30 * time.Second)
	for restarts.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if restarts.Load() < 3 {
		t.Fatalf("%d WAL restarts in 30s, want 3", restarts.Load())
	}
	claimN(t, s, 20) // a few after the last restart, in the current cycle
	var want int
	if err := s.r.QueryRow("SELECT count(*) FROM events").Scan(&want); err != nil {
		t.Fatal(err)
	}

	crash := copyCrashed(t, path)
	left := walSize(t, crash)
	var logs bytes.Buffer
	s2, err := Open(context.Background(), Config{Path: crash, WALZeroFill: true, WALRestartFrames: 4096},
		slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got := walSize(t, crash); got <= left || left >= openCheckpointBytes {
		t.Fatalf("the crash's WAL (%d bytes) was not filled further at open (%d bytes):\n%s", left, got, logs.String())
	}
	var got int
	if err := s2.r.QueryRow("SELECT count(*) FROM events").Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("after the crash: %d events, want %d", got, want)
	}
	if dup, err := s2.Claim(context.Background(), testEvent("evt_19")); err != nil || !dup {
		t.Errorf("claim evt_19 after the crash: duplicate %v, %v; want a duplicate", dup, err)
	}
	var check string
	if err := s2.r.QueryRow("PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
		t.Errorf("integrity_check: %q, %v", check, err)
	}
}
