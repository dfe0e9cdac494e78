package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/mattn/go-sqlite3"
)

// The WAL file is written once and then overwritten, as PostgreSQL does
// with its WAL segments (wal_init_zero, wal_recycle): a commit that
// extends a file makes its fsync allocate blocks and write the file's
// metadata too, one that overwrites written blocks only writes its pages.
// On ext4, 48 frames and an fsync cost 311 µs of CPU appended against
// 175 µs overwritten (BenchmarkWriterClaimZeroFilled: 7.1–7.8k CPU ns per
// claim, BenchmarkWriterClaim 8.6–9.9k). So Open fills the WAL with zeros
// to its kept size (zero frames are invalid, like a previous cycle's),
// Close leaves the file in place for the next start, and the checkpointer
// asks the kernel to read the part the writer will overwrite next (a
// frame is not a whole page of the file, so overwriting an evicted one
// reads it first, synchronously).

// fillChunk is the size of each write of zeros: a page. The kernel sizes
// the page cache's folios by the writes that create them (ext4 and XFS
// use large folios), and a commit that changes part of a folio makes the
// whole folio dirty, to be written at its fsync: over a WAL filled in
// 1 MiB writes, a commit of 5 frames wrote 1 MiB (write_bytes), in 4 KiB
// writes, 24 KiB. 1 GiB takes 0.75 s of writes, then 0.34 s of fsync.
const fillChunk = 4096

// zeroFill extends the file at path with zeros to size bytes and fsyncs
// it. It must run while nothing else writes the file. A fill that fails
// (a disk too small, say) is cut back to the file's old size, so it
// takes no space the database needs. It returns the bytes added.
func zeroFill(path string, size int64) (added int64, err error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			added, err = 0, cerr
		}
	}()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	from := fi.Size()
	if from >= size {
		return 0, nil
	}
	zeros := make([]byte, fillChunk)
	for off := from; off < size && err == nil; off += fillChunk {
		_, err = f.WriteAt(zeros[:min(fillChunk, size-off)], off)
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		return 0, errors.Join(err, f.Truncate(from))
	}
	return size - from, nil
}

// fillWAL zero-fills the WAL to size, if it pays on its filesystem,
// logging what it did. It runs in Open before the writer starts, in a
// write transaction that it rolls back: that holds the WAL's write lock,
// so no other process (the sqlite3 shell, say) writes the WAL meanwhile.
// It writes only past the file's end, so past every frame in it. A
// failure is logged, not returned: the WAL works as well unfilled, only
// slower.
func (s *Store) fillWAL(ctx context.Context, size int64) {
	if ok, fs := fillsPay(s.path); !ok {
		s.log.Info("store: the WAL is not zero-filled on this filesystem", "fs", fs)
		return
	}
	start := time.Now()
	added, err := s.fillLocked(ctx, size)
	switch {
	case errors.Is(err, os.ErrNotExist):
		// No WAL yet: SQLite creates it at the first commit, which then extends it.
	case err != nil:
		s.log.Warn("store: could not zero-fill the WAL; commits extend it instead (slower)", "err", err,
			"wal_mb", size>>20)
	case added > 0:
		s.log.Info("store: WAL zero-filled", "mb", added>>20, "took", time.Since(start).Round(time.Millisecond))
	}
}

// fillLocked is zeroFill of the WAL inside a write transaction of the
// writer's connection (BEGIN IMMEDIATE: the WAL's write lock), rolled back.
func (s *Store) fillLocked(ctx context.Context, size int64) (int64, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("take the write lock: %w", err)
	}
	defer func() { _ = tx.Rollback() }() // it wrote nothing
	return zeroFill(s.path+"-wal", size)
}

// keepWAL prepares the writer's connection, the last one open, so that
// closing it leaves the WAL file in place at its size instead of deleting
// it: it copies the WAL into the database and starts it again (RESTART,
// then a write, which writes a new WAL header: every older frame in the
// file is then invalid, so the next start reads one frame, not the last
// cycle's), and sets SQLite's persistent-WAL mode with no size limit.
// Run by Close after the readers and the checkpointer closed; on an error
// the close goes on as SQLite's default (the file is deleted).
func (s *Store) keepWAL(ctx context.Context) error {
	conn, err := s.w.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	// A reader of another process is not waited for long: the close goes
	// on without keeping the file.
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", restartWait.Milliseconds())); err != nil {
		return err
	}
	var busy, frames, copied int
	if err := conn.QueryRowContext(ctx, "PRAGMA wal_checkpoint(RESTART)").Scan(&busy, &frames, &copied); err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	if busy != 0 {
		return errors.New("restart: a reader is still open")
	}
	if _, err := conn.ExecContext(ctx, `INSERT INTO meta (key, value) VALUES ('closed_at', ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`, time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if _, err := conn.ExecContext(ctx, "PRAGMA journal_size_limit = -1"); err != nil {
		return err
	}
	return conn.Raw(func(dc any) error {
		c, ok := dc.(*sqlite3.SQLiteConn)
		if !ok {
			return fmt.Errorf("writer connection is a %T", dc)
		}
		return c.SetFileControlInt("main", sqlite3.SQLITE_FCNTL_PERSIST_WAL, 1)
	})
}

// prefetchAhead is how much of the WAL past its last frame the
// checkpointer asks the kernel to read: more than the writer commits
// between two checkpoints at the peak (about 60 MB in 500 ms).
const prefetchAhead = 128 << 20

// prefetchRanges are the parts of a WAL file of size bytes holding
// frames frames that the writer overwrites next: prefetchAhead bytes from
// the end of the last frame, the rest of them from the file's beginning
// when the file ends first (where the writer goes on after a restart). n
// is 0 for a part that is not there.
func prefetchRanges(frames int, size int64) (off, n, wrapped int64) {
	if frames > 0 {
		off = walBytes(frames)
	}
	if off >= size {
		return 0, 0, min(prefetchAhead, size)
	}
	n = min(prefetchAhead, size-off)
	return off, n, min(prefetchAhead-n, off)
}

// prefetchWAL asks the kernel to read into its cache the parts of the WAL
// the writer overwrites next, if they were evicted (a cold page would make
// the writer read it, synchronously, before writing a frame over it). The
// reads happen in the kernel's readahead, beside the writer.
func (s *Store) prefetchWAL(frames int) {
	f, err := os.Open(s.path + "-wal")
	if err != nil {
		return
	}
	defer func() { _ = f.Close() }() // read-only: nothing to lose
	fi, err := f.Stat()
	if err != nil {
		return
	}
	off, n, wrapped := prefetchRanges(frames, fi.Size())
	if n > 0 {
		willNeed(f, off, n)
	}
	if wrapped > 0 {
		willNeed(f, 0, wrapped)
	}
}
