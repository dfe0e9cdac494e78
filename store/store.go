// Package store is hookgate's durable record, in SQLite: every accepted
// inbound event, its publish state (the outbox), and delivery outcomes.
//
// The database runs in WAL mode with synchronous=FULL. All writes go through
// one writer goroutine that owns the only write connection and groups
// concurrent writes into one transaction and one fsync (group commit); each
// caller is answered only after its transaction committed. Reads use a
// separate pool of read-only connections, except the delivery engine's
// lookup before each round, which the writer answers between two commits
// (its page cache is the only one that survives them), or, for an event
// its commits just stored with no round yet, answers from memory. A checkpointer, on
// a connection of its own, copies the WAL into the database beside the
// writer and keeps the WAL file bounded.
package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mattn/go-sqlite3" // registers the "sqlite3" driver
)

//go:embed migrations/*.sql
var migrations embed.FS

// ErrUnavailable wraps every failure to read or write the database: the
// caller should answer 503 so the sender retries.
var ErrUnavailable = errors.New("store unavailable")

// ErrClosed is returned for writes submitted after Close.
var ErrClosed = errors.New("store closed")

// Config configures Open.
type Config struct {
	// Path of the SQLite file; its directory is created if missing. Required.
	Path string
	// BatchMax is the most writes one group-commit transaction takes. Default 512.
	BatchMax int
	// Readers is the size of the read connection pool. Default 4.
	Readers int
	// OnCommit, if set, is called by the writer after each committed batch
	// with the number of writes in it. It must not call the Store: the
	// writer would wait for itself.
	OnCommit func(n int)
	// WALRestartFrames is the WAL size, in frames (pages), past which the
	// writer runs a RESTART checkpoint between two commits, so that the WAL
	// starts again from its beginning. Without it, under constant reads
	// and writes, the WAL file grows without bound (SQLite's checkpoint
	// starvation). Writes wait for it: for the frames not yet copied and
	// their fsync (the checkpointer writes the rest back first; see
	// writeBack), and at most restartWait (100ms) for readers.
	// Default 262144 (1 GiB of 4 KiB pages).
	WALRestartFrames int
	// WALZeroFill, if set, fills the WAL file with zeros at Open to the
	// size a restart cuts it back to (once: Close leaves the file in
	// place), so that commits overwrite it instead of extending it, which
	// costs their fsync less (see walfile.go). Skipped on btrfs, ZFS and
	// tmpfs; a fill that fails (no space) is logged and undone. Default
	// false.
	WALZeroFill bool
	// OnWALRestart, if set, is called by the writer after each RESTART
	// checkpoint with how long it held up writes, also one that gave up
	// waiting for readers (the next checkpoint asks again). Like OnCommit,
	// it must not call the Store.
	OnWALRestart func(took time.Duration)
}

// Store is the SQLite store. It is safe for concurrent use.
type Store struct {
	w, r *sql.DB
	ckpt *sql.DB // the checkpointer's own connection
	// probe is a reader of its own for health probes (OutboxOldest), so
	// that operators' long reads holding every reader in r cannot fail
	// /readyz.
	probe    *sql.DB
	log      *slog.Logger
	batchMax int
	onCommit func(int)

	path             string
	walRestartFrames int
	walZeroFill      bool
	restartWanted    atomic.Bool  // set by the checkpointer, taken by the writer
	restartedAt      atomic.Int64 // the WAL's frames at the writer's last restart
	onWALRestart     func(time.Duration)

	ops       chan *op
	mu        sync.RWMutex // guards closed against sends on ops
	closed    bool
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error

	// The writer wakes the checkpointer after each commit.
	ckptWake chan struct{}
	ckptStop chan struct{} // closed by Close
	ckptDone chan struct{}
	dbFile   *os.File // the checkpointer's, for fsync before a restart

	stmts stmts
	wl    writerLookup // the writer's delivery lookups (lookup.go)
	looks []*op        // the writer's scratch for them
	rw    rawWriter    // the writer's hot writes (rawwrite.go)
	tail  tail         // the outbox's newest events, for Unpublished
	fresh *fresh       // events with no delivery yet, for DeliveryStatus
}

// op is one write waiting for the group commit, or a delivery lookup
// waiting for the writer. Ops are pooled: a write allocates nothing of its
// own but its closure.
type op struct {
	fn    func(*sql.Tx) error
	claim *Event // set instead of fn: a Claim, run without a savepoint
	dup   bool   // Claim's outcome
	// Set instead of fn: a delivery round (RecordRound), run without a
	// savepoint: its upsert and its attempts at unix ms now.
	round    *Delivery
	attempts []Attempt
	now      int64
	// Set instead of fn: a read (DeliveryStatus), answered before the
	// batch's transaction begins (see answerLookups).
	lookup bool
	look   statusLookup
	// Set instead of fn: MarkPublished's acks, at unix ms now, run
	// without a savepoint.
	published []Published
	// Set on an fn that never adds to the outbox (see tail).
	outboxSafe bool
	// Set on an fn that never adds a delivery row or removes an event
	// (see fresh).
	freshSafe bool
	err       error
	done      chan struct{} // capacity 1: the writer sends once the op is settled
}

var opPool = sync.Pool{New: func() any { return &op{done: make(chan struct{}, 1)} }}

func getOp() *op { return opPool.Get().(*op) }

func putOp(o *op) {
	*o = op{done: o.done}
	opPool.Put(o)
}

// Open opens (creating if needed) and migrates the database at cfg.Path and
// starts the writer.
func Open(ctx context.Context, cfg Config, log *slog.Logger) (*Store, error) {
	if cfg.Path == "" {
		return nil, errors.New("store: path is required")
	}
	if cfg.BatchMax <= 0 {
		cfg.BatchMax = 512
	}
	if cfg.Readers <= 0 {
		cfg.Readers = 4
	}
	if cfg.WALRestartFrames <= 0 {
		cfg.WALRestartFrames = 1 << 18
	}
	if dir := filepath.Dir(cfg.Path); dir != "" {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("store: create directory: %w", err)
		}
	}
	w, err := sql.Open(writerDriver, dsn(cfg.Path, false)+"&_cache_size=-8192")
	if err != nil {
		return nil, fmt.Errorf("store: open writer: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	if err := migrate(ctx, w); err != nil {
		return nil, errors.Join(fmt.Errorf("store: migrate %s: %w", cfg.Path, err), w.Close())
	}
	if err := checkpointAtOpen(ctx, w, cfg.Path, log); err != nil {
		return nil, errors.Join(fmt.Errorf("store: checkpoint %s: %w", cfg.Path, err), w.Close())
	}
	// When the writer starts the WAL again, it cuts the file to this size:
	// the restart size and room for what a restart overshoots (it comes
	// after a checkpoint sees the WAL past its size), so that the next
	// cycle overwrites that part too. Cutting it further would make the
	// first commit after each restart truncate the file (0.4 s for 1 GiB
	// to 64 MiB), which then grows again by allocating writes. Should the
	// writer's connection ever be opened again, the hook's -1 (never cut)
	// holds.
	if _, err := w.ExecContext(ctx, fmt.Sprintf("PRAGMA journal_size_limit = %d", walKeptBytes(cfg.WALRestartFrames))); err != nil {
		return nil, errors.Join(fmt.Errorf("store: set journal_size_limit: %w", err), w.Close())
	}
	r, err := sql.Open("sqlite3", dsn(cfg.Path, true))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("store: open readers: %w", err), w.Close())
	}
	r.SetMaxOpenConns(cfg.Readers)
	r.SetMaxIdleConns(cfg.Readers)
	probe, err := sql.Open("sqlite3", dsn(cfg.Path, true))
	if err != nil {
		closeReaders(r)
		return nil, errors.Join(fmt.Errorf("store: open probe reader: %w", err), w.Close())
	}
	probe.SetMaxOpenConns(1)
	probe.SetMaxIdleConns(1)
	// The checkpointer waits at most restartWait for readers: while a
	// RESTART checkpoint waits, the writer waits too.
	ckpt, err := sql.Open("sqlite3", dsnBusy(cfg.Path, false, restartWait))
	if err != nil {
		closeReaders(r, probe)
		return nil, errors.Join(fmt.Errorf("store: open checkpointer: %w", err), w.Close())
	}
	ckpt.SetMaxOpenConns(1)
	ckpt.SetMaxIdleConns(1)
	ckpt.SetConnMaxLifetime(0)
	ckpt.SetConnMaxIdleTime(0)
	// Read-write: on some systems a read-only file cannot be synced.
	dbFile, err := os.OpenFile(cfg.Path, os.O_RDWR, 0)
	if err != nil {
		closeReaders(r, probe)
		return nil, errors.Join(fmt.Errorf("store: open database file: %w", err), ckpt.Close(), w.Close())
	}
	s := &Store{
		w: w, r: r, probe: probe, ckpt: ckpt, log: log, dbFile: dbFile,
		path:             cfg.Path,
		walZeroFill:      cfg.WALZeroFill,
		batchMax:         cfg.BatchMax,
		onCommit:         cfg.OnCommit,
		walRestartFrames: cfg.WALRestartFrames,
		onWALRestart:     cfg.OnWALRestart,
		ops:              make(chan *op, cfg.BatchMax*4),
		done:             make(chan struct{}),
		ckptWake:         make(chan struct{}, 1),
		ckptStop:         make(chan struct{}),
		ckptDone:         make(chan struct{}),
		fresh:            newFresh(freshEvents),
	}
	if err := s.stmts.prepare(ctx, w); err != nil {
		s.stmts.close()
		closeReaders(s.r, s.probe)
		// dbFile last, as in Close.
		return nil, errors.Join(fmt.Errorf("store: prepare: %w", err), s.ckpt.Close(), s.w.Close(), s.dbFile.Close())
	}
	if s.walZeroFill {
		s.fillWAL(ctx, walKeptBytes(cfg.WALRestartFrames))
	}
	s.prefetchWAL(0) // after a reboot, say, the kept WAL is not in the page cache
	go s.writer()
	go s.checkpointer()
	return s, nil
}

// openCheckpointBytes is the WAL size found at open past which Open
// copies it into the database (and fsyncs that) before it returns.
const openCheckpointBytes = 32 << 20

// checkpointAtOpen copies a large WAL left by a crash into the database
// and starts it again, before the store takes writes. Left to the
// checkpointer, its copies would all be written out by one fsync of the
// database when a checkpoint first reached the WAL's end, seconds into
// serving, holding up the commits beside it (41–43 ms after a restart
// that found 571 MB of WAL); here it lengthens the start instead.
func checkpointAtOpen(ctx context.Context, w *sql.DB, path string, log *slog.Logger) error {
	fi, err := os.Stat(path + "-wal")
	if err != nil || fi.Size() < openCheckpointBytes {
		return nil //nolint:nilerr // no WAL, or a small one: nothing to do
	}
	start := time.Now()
	var busy, frames, copied int
	if err := w.QueryRowContext(ctx, "PRAGMA wal_checkpoint(RESTART)").Scan(&busy, &frames, &copied); err != nil {
		return err
	}
	// A WAL file kept by Close (Config.WALZeroFill) is large but holds a
	// frame or two: only a WAL that held much is worth a line.
	if walBytes(frames) >= openCheckpointBytes {
		log.Info("store: the WAL left at the last stop copied into the database", "wal_mb", walBytes(frames)>>20,
			"frames", frames, "copied", copied, "busy", busy == 1, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// closeReaders closes the readers' pools on a failed Open. Their errors
// are dropped: the readers are query_only, so closing them loses nothing,
// and the error Open returns is the one that matters.
func closeReaders(rs ...*sql.DB) {
	for _, r := range rs {
		_ = r.Close()
	}
}

// writerDriver is the sqlite3 driver of the writer connection (which also
// gets an 8 MiB page cache: it is the only connection whose cache survives
// other connections' commits). Automatic WAL checkpoints are off on it, so
// a checkpoint (copying the WAL into the database and fsyncing it) never
// runs inside a group commit, which every waiting request would wait for;
// the checkpointer runs them beside the writer, on its own connection.
const writerDriver = "sqlite3_hookgate_writer"

func init() {
	sql.Register(writerDriver, &sqlite3.SQLiteDriver{
		ConnectHook: func(c *sqlite3.SQLiteConn) error {
			// temp_store = MEMORY keeps the savepoint journal in memory: on
			// disk, once past 64 KiB, it would take a write for each page a
			// savepoint touches. journal_size_limit -1 never truncates the
			// WAL file; Open sets it to the WAL's restart size.
			_, err := c.Exec("PRAGMA wal_autocheckpoint = 0; PRAGMA temp_store = MEMORY; PRAGMA journal_size_limit = -1", nil)
			return err
		},
	})
}

// walBytes is the size of a WAL file of n frames of 4 KiB pages: a
// 32-byte header, then each page after a 24-byte frame header.
func walBytes(frames int) int64 { return 32 + int64(frames)*(24+4096) }

// walKeptBytes is the size the WAL file is kept at when the WAL restarts
// past restartFrames: those frames and an eighth more, for the frames
// committed between the checkpoint that finds the WAL past its size and
// the restart (about 55 MB at 110 MB/s of WAL and a 500 ms checkpoint
// interval; a larger overshoot is cut at the next cycle).
func walKeptBytes(restartFrames int) int64 { return walBytes(restartFrames + restartFrames/8) }

// restartWait bounds how long a RESTART checkpoint waits for readers (and
// so holds up the writer), and how long the checkpointer waits for a
// RESTART to end; a checkpoint that gives up tries again later.
const restartWait = 100 * time.Millisecond

// checkpointInterval is the shortest time between two checkpoints; the WAL
// holds about this much of the write load.
const checkpointInterval = 500 * time.Millisecond

// checkpointer copies committed WAL frames into the database file after
// commits (a PASSIVE checkpoint: it never blocks the writer or readers), at
// most every checkpointInterval. Once the WAL holds more than
// walRestartFrames it asks the writer for a RESTART checkpoint (see
// restartWAL).
func (s *Store) checkpointer() {
	defer close(s.ckptDone)
	pause := time.NewTimer(0)
	defer pause.Stop()
	for {
		select {
		case <-s.ckptStop:
			return
		case <-s.ckptWake:
		}
		if err := s.checkpoint(); err != nil {
			s.log.Warn("wal checkpoint failed; retrying after the next commit", "err", err)
		}
		pause.Reset(checkpointInterval)
		select {
		case <-s.ckptStop:
			return
		case <-pause.C:
		}
	}
}

// checkpoint runs one PASSIVE checkpoint, and asks the writer for a
// RESTART one if the WAL has grown past walRestartFrames, once most of
// what the RESTART would write is on disk (see writeBack).
func (s *Store) checkpoint() error { return s.checkpointAt(s.walRestartFrames) }

// checkpointAt is checkpoint with a restart limit of limit frames.
func (s *Store) checkpointAt(limit int) error {
	frames, copied, err := s.passive()
	if err != nil {
		return err
	}
	s.prefetchWAL(frames)
	if frames < limit {
		return nil
	}
	// A RESTART leaves the WAL at the size it saw, all copied, until the
	// next commit starts it again: asking now would restart it twice.
	// (All copied is not enough: a PASSIVE checkpoint reports the WAL as
	// it began, and under constant writes it often copies all of that.)
	if copied == frames && int64(frames) == s.restartedAt.Load() {
		return nil
	}
	err = s.writeBack(copied)
	s.restartWanted.Store(true) // even after an error: the WAL must not grow without bound
	return err
}

// writeBackRounds bounds writeBack's rounds; writeBackEnough is the number
// of frames a round may copy and be the last.
const (
	writeBackRounds = 4
	writeBackEnough = 2048
)

// writeBack fsyncs the database file and copies the frames committed
// meanwhile, until a round copies few, and fsyncs those too. SQLite
// fsyncs the database after a checkpoint only when it copied the WAL to
// its very end, which under constant writes no PASSIVE checkpoint does:
// every page they copied since the last restart would wait in the OS cache
// for the RESTART's fsync, which writes them out while every write waits
// (0.2–0.8 s on a store of 2,000,000 events with random IDs). Done here,
// beside the writer, it leaves the RESTART little to write. Frames stay in
// the WAL until the RESTART, so a copy not yet on disk loses nothing.
func (s *Store) writeBack(copied int) error {
	for range writeBackRounds {
		if err := s.syncDB(); err != nil {
			return err
		}
		_, now, err := s.passive()
		if err != nil {
			return err
		}
		if now-copied <= writeBackEnough {
			return s.syncDB()
		}
		copied = now
	}
	return nil
}

// syncDB fsyncs the database file.
func (s *Store) syncDB() error {
	if err := s.dbFile.Sync(); err != nil {
		return fmt.Errorf("fsync database: %w", err)
	}
	return nil
}

// passive runs a PASSIVE checkpoint: it copies what it can of the WAL
// without waiting for anyone, and says how many frames the WAL holds and
// how many of them are copied.
func (s *Store) passive() (frames, copied int, err error) {
	var busy int
	err = s.ckpt.QueryRow("PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied)
	return frames, copied, err
}

// restartWAL runs a RESTART checkpoint on the writer's connection, between
// two group commits: it copies the frames the last PASSIVE checkpoint left
// and waits (at most restartWait) for the readers still on the WAL, so
// that the next commit writes the WAL from its beginning. Run by the
// writer, it never competes with the writer for the write lock; the
// writes queued meanwhile wait for it. Busy (readers still there after
// restartWait) is not an error: the next checkpoint asks again.
func (s *Store) restartWAL() {
	start := time.Now()
	var busy, frames, copied int
	_, err := s.w.Exec(fmt.Sprintf("PRAGMA busy_timeout = %d", restartWait.Milliseconds()))
	if err == nil {
		err = s.w.QueryRow("PRAGMA wal_checkpoint(RESTART)").Scan(&busy, &frames, &copied)
	}
	if _, rerr := s.w.Exec("PRAGMA busy_timeout = 5000"); err == nil {
		err = rerr
	}
	if err != nil {
		s.log.Warn("wal restart failed; retrying after the next checkpoint", "err", err)
		return
	}
	took := time.Since(start)
	if busy == 0 {
		s.restartedAt.Store(int64(frames))
	}
	s.log.Debug("wal restarted", "took", took, "busy", busy == 1, "frames", frames, "copied", copied)
	if s.onWALRestart != nil {
		s.onWALRestart(took)
	}
}

// dsn is the data source of a connection that waits up to 5s for a lock.
func dsn(path string, readOnly bool) string { return dsnBusy(path, readOnly, 5*time.Second) }

func dsnBusy(path string, readOnly bool, busy time.Duration) string {
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "FULL")
	q.Set("_busy_timeout", strconv.FormatInt(busy.Milliseconds(), 10))
	q.Set("_foreign_keys", "on")
	// Keep each connection's statements prepared: without this every query
	// not prepared by hand is parsed and planned again at each call.
	q.Set("_stmt_cache_size", "128")
	if readOnly {
		q.Set("_query_only", "1")
	} else {
		q.Set("_txlock", "immediate")
	}
	return "file:" + path + "?" + q.Encode()
}

// Stop is Close, in the shape of every long-running service (Open starts
// the store): the writer and the checkpointer end after the writes already
// queued. Safe to call twice.
func (s *Store) Stop(context.Context) error { return s.Close() }

// Close stops taking writes, finishes those already queued, and closes the
// database. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.fresh.stop() // first: a lookup from now on is told the store is closed
		s.mu.Lock()
		s.closed = true
		close(s.ops)
		s.mu.Unlock()
		<-s.done
		close(s.ckptStop)
		<-s.ckptDone
		s.stmts.close()
		err := errors.Join(s.ckpt.Close(), s.r.Close(), s.probe.Close())
		if s.walZeroFill && err == nil {
			if kerr := s.keepWAL(context.Background()); kerr != nil {
				s.log.Warn("store: the WAL file is not kept for the next start; it will be zero-filled again", "err", kerr)
			}
		}
		// dbFile last: closing any descriptor of the file drops the POSIX
		// locks SQLite's connections hold on it.
		s.closeErr = errors.Join(err, s.w.Close(), s.dbFile.Close())
	})
	return s.closeErr
}

// write runs fn in the next group-commit transaction and returns once that
// transaction committed (or failed). fn runs inside its own savepoint, so its
// error rolls back only its own changes. fn runs on the writer goroutine and
// must not call the Store's methods (DeliveryStatus included): the writer
// would wait for itself.
func (s *Store) write(ctx context.Context, fn func(*sql.Tx) error) error {
	return s.writeOp(ctx, fn, 0)
}

// writeOutboxSafe is write for an fn that never adds events to the outbox
// (it may take them out): unlike other writes, its commit leaves the
// in-memory tail of the outbox in use.
func (s *Store) writeOutboxSafe(ctx context.Context, fn func(*sql.Tx) error) error {
	return s.writeOp(ctx, fn, leavesOutbox)
}

// writeFlags says what a generic write leaves alone, so that its commit
// leaves the writer's views of it in memory in use.
type writeFlags uint8

const (
	leavesOutbox     writeFlags = 1 << iota // adds no event to the outbox (tail)
	leavesDeliveries                        // adds no delivery row, removes no event (fresh)
)

func (s *Store) writeOp(ctx context.Context, fn func(*sql.Tx) error, flags writeFlags) error {
	o := getOp()
	o.fn, o.outboxSafe, o.freshSafe = fn, flags&leavesOutbox != 0, flags&leavesDeliveries != 0
	err := s.submit(ctx, o)
	putOp(o)
	return err
}

// submit queues o for the next group commit and returns once it is
// settled; the caller reads o's outcome, then puts o back.
func (s *Store) submit(ctx context.Context, o *op) error {
	return s.submitWithin(ctx, o, 0)
}

// submitWithin is submit, waiting for room in a full queue at most wait
// (context.DeadlineExceeded) when wait > 0.
func (s *Store) submitWithin(ctx context.Context, o *op, wait time.Duration) error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	select {
	case s.ops <- o:
	default: // the queue is full: wait for room, as long as ctx and wait let us
		var expired <-chan time.Time
		if wait > 0 {
			t := time.NewTimer(wait)
			defer t.Stop()
			expired = t.C
		}
		select {
		case s.ops <- o:
		case <-ctx.Done():
			s.mu.RUnlock()
			return ctx.Err()
		case <-expired:
			s.mu.RUnlock()
			return context.DeadlineExceeded
		}
	}
	s.mu.RUnlock()
	// Once queued, the op runs even if ctx ends: wait for its outcome so the
	// caller never reports failure for a write that committed.
	<-o.done
	return o.err
}

func (s *Store) writer() {
	defer close(s.done)
	defer s.wl.close()
	defer s.rw.close()
	batch := make([]*op, 0, s.batchMax)
	last := 0 // size of the previous batch: the load
	for first := range s.ops {
		batch = append(batch[:0], first)
		// Take what is queued. Under load (fewer queued than the last batch
		// took), yield a few times first so that writers already running
		// join this commit rather than wait a whole commit for the next:
		// the batch follows the load, and a lone write is not delayed.
		for yield := 0; ; yield++ {
			s.drain(&batch)
			if yield == maxYields || len(batch) >= last || len(batch) >= s.batchMax {
				break
			}
			runtime.Gosched()
		}
		last = len(batch) // lookups included: they come with the load
		if batch = s.answerLookups(batch); len(batch) == 0 {
			continue
		}
		n := len(batch)
		err := s.commit(batch)
		s.fresh.committed(batch, err == nil) // before the relay may publish a claim
		s.tail.committed(batch, err == nil)
		for i, o := range batch {
			if err != nil && o.err == nil {
				o.err = err
			}
			batch[i] = nil // o is the caller's again once done is sent
			o.done <- struct{}{}
		}
		if err == nil {
			select {
			case s.ckptWake <- struct{}{}:
			default:
			}
			if s.onCommit != nil {
				s.onCommit(n)
			}
		}
		if s.restartWanted.Swap(false) {
			s.restartWAL()
		}
	}
}

// maxYields bounds how often the writer yields to let more writes join a
// batch.
const maxYields = 2

// drain appends queued ops to batch, up to batchMax, without waiting.
func (s *Store) drain(batch *[]*op) {
	for len(*batch) < s.batchMax {
		select {
		case o, ok := <-s.ops:
			if !ok {
				return
			}
			*batch = append(*batch, o)
		default:
			return
		}
	}
}

// commit runs a batch in one transaction. A failure of the transaction as a
// whole is returned (and given to every op); an op's own error stays in o.err.
//
// The hot writes (a Claim, a delivery round, MarkPublished) run without a
// savepoint (which would copy every page they touch into the statement
// journal), on the driver connection (rawwrite.go): their single-table
// statements fail only when the store is broken or inconsistent, and then
// the whole batch fails, since SQLite may have rolled back the whole
// transaction (it does on a full disk or an I/O error).
func (s *Store) commit(batch []*op) error {
	conn, err := s.w.Conn(context.Background())
	if err != nil {
		return s.unavailable("begin", err)
	}
	defer conn.Close()
	for _, o := range batch {
		if !o.hot() {
			return s.commitTx(conn, batch)
		}
	}
	var step string
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(driver.Conn)
		if !ok {
			step = "begin"
			return fmt.Errorf("driver connection is a %T", dc)
		}
		abort := func(err error) error { return s.giveUp(s.rw.abort(c, err)) }
		if err := s.rw.on(c); err != nil {
			step = "prepare"
			return err
		}
		if _, err := s.rw.begin.ExecContext(context.Background(), nil); err != nil {
			step = "begin"
			return abort(err) // were the connection left inside a transaction
		}
		for _, o := range batch {
			var err error
			if step, err = s.rw.run(o); err != nil {
				return abort(err)
			}
		}
		if _, err := s.rw.commit.ExecContext(context.Background(), nil); err != nil {
			step = "commit"
			return abort(err)
		}
		return nil
	})
	if err != nil {
		return s.unavailable(step, err)
	}
	return nil
}

// giveUp closes the writer's own statements when err gives the writer's
// connection up (driver.ErrBadConn): database/sql then closes it, and
// SQLite closes it (ending its transaction and freeing the write lock)
// only once none of its statements is left. It returns err.
func (s *Store) giveUp(err error) error {
	if errors.Is(err, driver.ErrBadConn) {
		s.rw.close()
		s.wl.close()
	}
	return err
}

// commitTx is commit for a batch with a generic write: a database/sql
// transaction, the hot writes on its connection in between, each generic
// write in a savepoint of its own.
func (s *Store) commitTx(conn *sql.Conn, batch []*op) error {
	tx, err := conn.BeginTx(context.Background(), nil)
	if err != nil {
		return s.unavailable("begin", err)
	}
	// Statements bound to tx, made once per batch.
	var savepoint, release, rollbackTo *sql.Stmt
	for i := 0; i < len(batch); {
		if batch[i].hot() {
			j := i + 1
			for j < len(batch) && batch[j].hot() {
				j++
			}
			if step, err := s.runHot(conn, batch[i:j]); err != nil {
				tx.Rollback()
				return s.unavailable(step, err)
			}
			i = j
			continue
		}
		o := batch[i]
		i++
		if savepoint == nil {
			savepoint, release, rollbackTo = tx.Stmt(s.stmts.savepoint), tx.Stmt(s.stmts.release), tx.Stmt(s.stmts.rollbackTo)
		}
		if _, err := savepoint.Exec(); err != nil {
			tx.Rollback()
			return s.unavailable("savepoint", err)
		}
		if o.err = o.fn(tx); o.err != nil {
			if _, err := rollbackTo.Exec(); err != nil {
				tx.Rollback()
				return s.unavailable("rollback to savepoint", err)
			}
		}
		if _, err := release.Exec(); err != nil {
			tx.Rollback()
			return s.unavailable("release savepoint", err)
		}
	}
	if err := tx.Commit(); err != nil {
		tx.Rollback()
		return s.unavailable("commit", err)
	}
	return nil
}

// runHot runs hot writes on conn inside the transaction tx has open on
// it, and says the step that failed.
func (s *Store) runHot(conn *sql.Conn, ops []*op) (step string, err error) {
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(driver.Conn)
		if !ok {
			step = "begin"
			return fmt.Errorf("driver connection is a %T", dc)
		}
		if err := s.rw.on(c); err != nil {
			step = "prepare"
			return err
		}
		for _, o := range ops {
			var err error
			if step, err = s.rw.run(o); err != nil {
				return err
			}
		}
		return nil
	})
	return step, err
}

func (s *Store) unavailable(step string, err error) error {
	s.log.Error("store write failed", "step", step, "err", err)
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, step, err)
}

// Ping checks that the database answers reads.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.r.PingContext(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// migrate applies the embedded migrations not yet recorded in user_version.
func migrate(ctx context.Context, db *sql.DB) error { return migrateTo(ctx, db, math.MaxInt) }

// migrateTo applies the migrations not yet recorded, up to number upTo (tests
// build databases of an earlier schema with it).
func migrateTo(ctx context.Context, db *sql.DB, upTo int) error {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	var version int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return err
	}
	nums := make([]int, len(names))
	for i, name := range names {
		if nums[i], err = strconv.Atoi(strings.SplitN(filepath.Base(name), "_", 2)[0]); err != nil {
			return fmt.Errorf("migration %s: bad name", name)
		}
	}
	// An older build would misread a newer schema (from 0008 on the writer,
	// not a trigger, fills the outbox: an older build's claims would never
	// be published), so it refuses to start on one.
	if latest := slices.Max(nums); version > latest {
		return fmt.Errorf("the database's schema version is %d, newer than this build's %d: run the hookgate version that wrote it, or a later one", version, latest)
	}
	for i, name := range names {
		n := nums[i]
		if n <= version || n > upTo {
			continue
		}
		body, err := migrations.ReadFile(name)
		if err != nil {
			return err
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, string(body)); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %s: %w", name, err)
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", n)); err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		version = n
	}
	return nil
}
