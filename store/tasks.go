package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// TaskSource is the reserved source of task events. Source names from the
// configuration cannot start with '_'.
const TaskSource = "_task"

// KeyOutcome is what ClaimKey found.
type KeyOutcome int

// Outcomes of ClaimKey.
const (
	KeyClaimed  KeyOutcome = iota // new (or expired, or abandoned): the caller runs the request
	KeyInFlight                   // the first request with this key is still running
	KeyMismatch                   // the key was used with a different request
	KeyReplay                     // the stored answer is to be replayed
)

// StoredAnswer is the answer kept for a key.
type StoredAnswer struct {
	Status   int
	Response []byte
	TaskID   string
}

// ClaimKey claims an Idempotency-Key for a request with this fingerprint.
// A key left 'processing' for longer than abandonAfter (a crash mid-request)
// is claimed again; an expired key is forgotten.
func (s *Store) ClaimKey(ctx context.Context, scope, key, fingerprint string, ttl, abandonAfter time.Duration) (KeyOutcome, *StoredAnswer, error) {
	var out KeyOutcome
	var ans StoredAnswer
	now := time.Now()
	err := s.writeOp(ctx, func(tx *sql.Tx) error {
		var fp, state string
		var created, expires int64
		var resp []byte
		err := tx.QueryRow(`SELECT fingerprint, state, status, response, task_id, created_at, expires_at
			FROM idempotency_keys WHERE scope = ? AND key = ?`, scope, key).Scan(
			&fp, &state, &ans.Status, &resp, &ans.TaskID, &created, &expires)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		case expires <= now.UnixMilli():
			// Forgotten: fall through to a new claim.
		case fp != fingerprint:
			out = KeyMismatch
			return nil
		case state == "complete":
			out, ans.Response = KeyReplay, resp
			return nil
		case now.Sub(time.UnixMilli(created)) < abandonAfter:
			out = KeyInFlight
			return nil
		}
		out = KeyClaimed
		_, err = tx.Exec(`INSERT INTO idempotency_keys (scope, key, fingerprint, state, created_at, expires_at)
			VALUES (?, ?, ?, 'processing', ?, ?)
			ON CONFLICT (scope, key) DO UPDATE SET fingerprint = excluded.fingerprint, state = 'processing',
				status = 0, response = NULL, task_id = '', created_at = excluded.created_at, expires_at = excluded.expires_at`,
			scope, key, fingerprint, now.UnixMilli(), now.Add(ttl).UnixMilli())
		return err
	}, leavesOutbox|leavesDeliveries)
	if err != nil {
		return 0, nil, fmt.Errorf("claim idempotency key: %w", err)
	}
	return out, &ans, nil
}

// ReleaseKey forgets a claimed key whose request did not run (it may be
// used again at once).
func (s *Store) ReleaseKey(ctx context.Context, scope, key string) error {
	return s.writeOp(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`DELETE FROM idempotency_keys WHERE scope = ? AND key = ? AND state = 'processing'`, scope, key)
		return err
	}, leavesOutbox|leavesDeliveries)
}

// CreateTask stores a task in one transaction: its event (in the outbox),
// its owner, and the answer kept under its Idempotency-Key.
func (s *Store) CreateTask(ctx context.Context, ev *Event, scope, key string, status int, response []byte) error {
	ev.Source = TaskSource
	if ev.Headers == nil {
		ev.Headers = []byte("{}")
	}
	return s.writeOp(ctx, func(tx *sql.Tx) error {
		dup, err := insertEvent(tx.Stmt(s.stmts.claim), tx.Stmt(s.stmts.enqueue), ev)
		if err == nil && dup {
			err = ErrTaskExists
		}
		if err != nil {
			return fmt.Errorf("task event: %w", err)
		}
		if _, err := tx.Exec(`INSERT INTO tasks (id, scope, created_at) VALUES (?, ?, ?)`,
			ev.ID, scope, ev.ReceivedAt.UnixMilli()); err != nil {
			return err
		}
		res, err := tx.Exec(`UPDATE idempotency_keys SET state = 'complete', status = ?, response = ?, task_id = ?
			WHERE scope = ? AND key = ?`, status, response, ev.ID, scope, key)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return errors.New("idempotency key no longer claimed")
		}
		return nil
	}, leavesDeliveries)
}

// ErrTaskExists is CreateTask's error when an event with the task's ID is
// stored already: in cluster mode, the same task another gateway created,
// whose record reached this store.
var ErrTaskExists = errors.New("an event with this id exists")

// DropTask undoes CreateTask of task id, whose claim another gateway
// holds for another request (cluster mode: one key used at once on two
// gateways; the caller answers 422). It forgets the answer kept under
// (scope, key), and removes the task's event, outbox entry and owner if
// the event is still the request stored here, whose body has SHA-256
// digest (hex): a record of the holder's may have replaced it.
func (s *Store) DropTask(ctx context.Context, id, scope, key, digest string) error {
	err := s.writeOutboxSafe(ctx, func(tx *sql.Tx) error {
		if _, err := tx.Exec(`DELETE FROM idempotency_keys WHERE scope = ? AND key = ? AND task_id = ?`,
			scope, key, id); err != nil {
			return err
		}
		ev := OldEvent{Source: TaskSource, ID: id}
		var body []byte
		err := tx.QueryRow(`SELECT seq, body FROM events WHERE source = ? AND event_id = ?`, TaskSource, id).
			Scan(&ev.Seq, &body)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if sum := sha256.Sum256(body); hex.EncodeToString(sum[:]) != digest {
			return nil
		}
		if _, err := tx.Exec(`DELETE FROM outbox WHERE seq = ?`, ev.Seq); err != nil {
			return err
		}
		_, err = deleteEvent(tx, &ev)
		return err
	})
	if err != nil {
		return fmt.Errorf("drop task %s: %w", id, err)
	}
	return nil
}

// TaskScope returns the scope that owns a task, or ErrNotFound.
func (s *Store) TaskScope(ctx context.Context, id string) (string, error) {
	var scope string
	err := s.r.QueryRowContext(ctx, `SELECT scope FROM tasks WHERE id = ?`, id).Scan(&scope)
	if errors.Is(err, sql.ErrNoRows) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("%w: task: %w", ErrUnavailable, err)
	}
	return scope, nil
}

// PruneKeys deletes up to limit expired idempotency keys.
func (s *Store) PruneKeys(ctx context.Context, now time.Time, limit int) (int, error) {
	var n int64
	err := s.writeOp(ctx, func(tx *sql.Tx) error {
		res, err := tx.Exec(`DELETE FROM idempotency_keys WHERE rowid IN
			(SELECT rowid FROM idempotency_keys WHERE expires_at <= ? LIMIT ?)`, now.UnixMilli(), limit)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	}, leavesOutbox|leavesDeliveries)
	return int(n), err
}

// TaskRequest is the body of a task event: the request to make.
type TaskRequest struct {
	URL         string            `json:"url"`
	Method      string            `json:"method"`
	Headers     map[string]string `json:"headers,omitempty"`
	Body        []byte            `json:"body,omitempty"`
	ContentType string            `json:"content_type,omitempty"`
	// IdempotencyKey is the caller's key sent downstream in place of the
	// derived one; "" sends the derived one.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}
