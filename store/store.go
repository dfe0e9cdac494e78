// Package store is hookgate's durable record, in SQLite: every accepted
// inbound event, its publish state (the outbox), and delivery outcomes.
//
// The database runs in WAL mode with synchronous=FULL. All writes go through
// one writer goroutine that owns the only write connection and groups
// concurrent writes into one transaction and one fsync (group commit); each
// caller is answered only after its transaction committed. Reads use a
// separate pool of read-only connections.
package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	_ "github.com/mattn/go-sqlite3" // registers the "sqlite3" driver
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
	// with the number of writes in it.
	OnCommit func(n int)
}

// Store is the SQLite store. It is safe for concurrent use.
type Store struct {
	w, r     *sql.DB
	log      *slog.Logger
	batchMax int
	onCommit func(int)

	ops       chan *op
	mu        sync.RWMutex // guards closed against sends on ops
	closed    bool
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error

	stmts stmts
}

// op is one write waiting for the group commit.
type op struct {
	fn   func(*sql.Tx) error
	err  error
	done chan struct{}
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
	if dir := filepath.Dir(cfg.Path); dir != "" {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("store: create directory: %w", err)
		}
	}
	w, err := sql.Open("sqlite3", dsn(cfg.Path, false))
	if err != nil {
		return nil, fmt.Errorf("store: open writer: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	if err := migrate(ctx, w); err != nil {
		w.Close()
		return nil, fmt.Errorf("store: migrate %s: %w", cfg.Path, err)
	}
	r, err := sql.Open("sqlite3", dsn(cfg.Path, true))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("store: open readers: %w", err)
	}
	r.SetMaxOpenConns(cfg.Readers)
	r.SetMaxIdleConns(cfg.Readers)
	s := &Store{
		w: w, r: r, log: log,
		batchMax: cfg.BatchMax,
		onCommit: cfg.OnCommit,
		ops:      make(chan *op, cfg.BatchMax*4),
		done:     make(chan struct{}),
	}
	if err := s.stmts.prepare(ctx, w); err != nil {
		s.w.Close()
		s.r.Close()
		return nil, fmt.Errorf("store: prepare: %w", err)
	}
	go s.writer()
	return s, nil
}

func dsn(path string, readOnly bool) string {
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "FULL")
	q.Set("_busy_timeout", "5000")
	q.Set("_foreign_keys", "on")
	if readOnly {
		q.Set("_query_only", "1")
	} else {
		q.Set("_txlock", "immediate")
	}
	return "file:" + path + "?" + q.Encode()
}

// Close stops taking writes, finishes those already queued, and closes the
// database. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		close(s.ops)
		s.mu.Unlock()
		<-s.done
		s.stmts.close()
		s.closeErr = errors.Join(s.r.Close(), s.w.Close())
	})
	return s.closeErr
}

// write runs fn in the next group-commit transaction and returns once that
// transaction committed (or failed). fn runs inside its own savepoint, so its
// error rolls back only its own changes.
func (s *Store) write(ctx context.Context, fn func(*sql.Tx) error) error {
	o := &op{fn: fn, done: make(chan struct{})}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	select {
	case s.ops <- o:
	case <-ctx.Done():
		s.mu.RUnlock()
		return ctx.Err()
	}
	s.mu.RUnlock()
	// Once queued, the op runs even if ctx ends: wait for its outcome so the
	// caller never reports failure for a write that committed.
	<-o.done
	return o.err
}

func (s *Store) writer() {
	defer close(s.done)
	batch := make([]*op, 0, s.batchMax)
	for first := range s.ops {
		batch = append(batch[:0], first)
	drain:
		for len(batch) < s.batchMax {
			select {
			case o, ok := <-s.ops:
				if !ok {
					break drain
				}
				batch = append(batch, o)
			default:
				break drain
			}
		}
		err := s.commit(batch)
		for _, o := range batch {
			if err != nil && o.err == nil {
				o.err = err
			}
			close(o.done)
		}
		if err == nil && s.onCommit != nil {
			s.onCommit(len(batch))
		}
	}
}

// commit runs a batch in one transaction. A failure of the transaction as a
// whole is returned (and given to every op); an op's own error stays in o.err.
func (s *Store) commit(batch []*op) error {
	tx, err := s.w.Begin()
	if err != nil {
		return s.unavailable("begin", err)
	}
	for _, o := range batch {
		if _, err := tx.Exec("SAVEPOINT op"); err != nil {
			tx.Rollback()
			return s.unavailable("savepoint", err)
		}
		if o.err = o.fn(tx); o.err != nil {
			if _, err := tx.Exec("ROLLBACK TO op"); err != nil {
				tx.Rollback()
				return s.unavailable("rollback to savepoint", err)
			}
		}
		if _, err := tx.Exec("RELEASE op"); err != nil {
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
func migrate(ctx context.Context, db *sql.DB) error {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	var version int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return err
	}
	for _, name := range names {
		n, err := strconv.Atoi(strings.SplitN(filepath.Base(name), "_", 2)[0])
		if err != nil {
			return fmt.Errorf("migration %s: bad name", name)
		}
		if n <= version {
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
