package main

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/store"
)

// prefill stores n events that were accepted, published and delivered
// (one succeeded delivery with one attempt each, when route is not empty)
// before the gateway starts, so that a run meets indexes of a production
// size rather than the few hundred thousand rows a run adds. The events
// look like the load's: size-byte bodies, IDs random or counted as the
// load's are. It runs the gateway's migrations first (store.Open).
func prefill(ctx context.Context, path string, n, size int, random bool, route string) (err error) {
	st, err := store.Open(ctx, store.Config{Path: path}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	if err := st.Close(); err != nil {
		return err
	}
	// One connection, no fsync per transaction: a prefill that dies is
	// started again, not recovered.
	db, err := sql.Open("sqlite3", "file:"+path+"?_synchronous=OFF&_busy_timeout=5000&_cache_size=-65536")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, db.Close()) }()
	db.SetMaxOpenConns(1)

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	now := time.Now().UnixMilli()
	var body []byte
	const chunk = 50_000
	for done := 0; done < n; {
		if err := ctx.Err(); err != nil {
			return err
		}
		m := min(chunk, n-done)
		if err := prefillChunk(ctx, db, done, m, size, random, route, rng, now, &body); err != nil {
			return fmt.Errorf("prefill: %w", err)
		}
		done += m
		if done%500_000 == 0 || done == n {
			logf("prefill: %d of %d events stored", done, n)
		}
	}
	if _, err := db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		return err
	}
	// Written without fsyncs: on disk before the gateway starts (see copyFile).
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

func prefillChunk(ctx context.Context, db *sql.DB, from, m, size int, random bool, route string,
	rng *rand.Rand, now int64, body *[]byte) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// Each event goes straight to published, as the relay's mark would
	// leave it (a claim's outbox row is the writer's, not the schema's).
	insEvent, err := tx.Prepare(`INSERT INTO events (source, event_id, event_type, content_type, headers, body, received_at)
		VALUES ('stripe', ?, ?, 'application/json', '{"User-Agent":"bench"}', ?, ?)`)
	if err != nil {
		return err
	}
	mark, err := tx.Prepare(`INSERT INTO published (seq, stream_seq, published_at) VALUES (?, 0, ?)`)
	if err != nil {
		return err
	}
	insDelivery, err := tx.Prepare(`INSERT INTO deliveries (event_seq, route, source, event_id, event_type, idempotency_key,
		state, attempts, last_status, created_at, updated_at)
		VALUES (?, ?, 'stripe', ?, ?, ?, 'succeeded', 1, 200, ?, ?)`)
	if err != nil {
		return err
	}
	insAttempt, err := tx.Prepare(`INSERT INTO attempts (delivery_id, attempt, started_at, duration_ms, status)
		VALUES (?, 1, ?, 1, 200)`)
	if err != nil {
		return err
	}
	for i := range m {
		id := "evt_pre" + strconv.Itoa(from+i)
		if random {
			id = randomID(rng)
		}
		*body = appendEvent((*body)[:0], id, size)
		typ := eventType(id)
		r, err := insEvent.Exec(id, typ, *body, now)
		if err != nil {
			return err
		}
		seq, err := r.LastInsertId()
		if err != nil {
			return err
		}
		if _, err := mark.Exec(seq, now); err != nil {
			return err
		}
		if route == "" {
			continue
		}
		r, err = insDelivery.Exec(seq, route, id, typ, outbound.IdempotencyKey(route, "stripe", id), now, now)
		if err != nil {
			return err
		}
		did, err := r.LastInsertId()
		if err != nil {
			return err
		}
		if _, err := insAttempt.Exec(did, now); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// prefillCached is prefill through a cache directory: a store filled
// before with the same parameters and schema is copied, not filled again,
// unless it is older than prefillMaxAge.
func prefillCached(ctx context.Context, path, cacheDir string, n, size int, random bool, route string) error {
	if cacheDir == "" {
		return prefill(ctx, path, n, size, random, route)
	}
	ids := "counted"
	if random {
		ids = "random"
	}
	version, err := schemaVersion(ctx)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("prefill-%d-%dB-%s-route-%s-schema%d.db", n, size, ids, cmp.Or(route, "none"), version)
	cached := filepath.Join(cacheDir, name)
	fi, err := os.Stat(cached)
	if err == nil && time.Since(fi.ModTime()) > prefillMaxAge {
		logf("prefill: %s is older than %s; filling again", cached, prefillMaxAge)
		err = fs.ErrNotExist
	}
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(cacheDir, 0o750); err != nil {
			return err
		}
		tmp := cached + ".tmp"
		if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err // a fill would go on from what is left
		}
		if err := prefill(ctx, tmp, n, size, random, route); err != nil {
			return err
		}
		if err := os.Rename(tmp, cached); err != nil {
			return err
		}
	} else if err != nil {
		return err
	} else {
		logf("prefill: copying %s", cached)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	return copyFile(cached, path)
}

// prefillMaxAge is how long a cached pre-filled store is used: its events
// were received when it was filled, and the gateway's retention (30 days
// by default) would start deleting them during a run.
const prefillMaxAge = 7 * 24 * time.Hour

// schemaVersion is the store's schema version (its migrations' count),
// read from a new empty store.
func schemaVersion(ctx context.Context) (int, error) {
	dir, err := os.MkdirTemp("", "hookgate-schema-")
	if err != nil {
		return 0, err
	}
	defer removeAll(dir)
	path := filepath.Join(dir, "db")
	st, err := store.Open(ctx, store.Config{Path: path}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return 0, err
	}
	if err := st.Close(); err != nil {
		return 0, err
	}
	db, err := sql.Open("sqlite3", "file:"+path+"?mode=ro")
	if err != nil {
		return 0, err
	}
	defer func() { _ = db.Close() }() // read only
	var v int
	err = db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v)
	return v, err
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }() // read only
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		return errors.Join(err, out.Close())
	}
	// On disk before the gateway starts: else its first fsyncs write back
	// the whole copy, and the run measures that.
	if err := out.Sync(); err != nil {
		return errors.Join(err, out.Close())
	}
	return out.Close()
}

// firstEvent sends one event and waits until the downstream has it (with
// -no-route: until the outbox is empty, so published), then clears the
// downstream's counts for the run.
func firstEvent(ctx context.Context, addr string, ds *downstream, ob *outbox, o *options, tag string) error {
	l := newLoader(addr, 1, o.size, 0, tag)
	defer l.client.CloseIdleConnections()
	if !l.workers[0].send() {
		return errors.New("first event: not accepted")
	}
	through := func() bool { return ds.distinct.Load() > 0 }
	if o.noRoute {
		through = func() bool { return ob.backlog() == 0 }
	}
	deadline := time.Now().Add(o.drainTimeout)
	for !through() {
		if time.Now().After(deadline) {
			return fmt.Errorf("first event: not through after %s", o.drainTimeout)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	ds.reset()
	return nil
}
