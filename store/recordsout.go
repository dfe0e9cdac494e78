package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// ClusterRound says how a round of cluster mode is recorded (see
// RecordClusterRound).
type ClusterRound struct {
	// Origin names this gateway in the round's record.
	Origin string
	// FirstAttempt is the cluster-wide number of the round's first
	// attempt: the attempts the delivery had in the cluster, plus one.
	FirstAttempt int
	// Attempts is the delivery's attempts in the whole cluster after the
	// round.
	Attempts int
	// Version is the revision the round's outcome got in the cluster's
	// delivery-state bucket; 0 when it could not be written there: the
	// round is recorded here, and no record of it is published.
	Version uint64
	// Outcome is set for an outcome recorded without its round's attempts
	// (the cluster's, which no gateway recorded): its last status and
	// error are the delivery's even so.
	Outcome bool
}

// RecordClusterRound is RecordRound for cluster mode, in one transaction:
// the delivery takes the cluster's attempt count and the round's version,
// its attempts are numbered as in the cluster, and (Version > 0) the
// round's record is put in records_out, to be published to the other
// gateways (see RecordsOut). It sets d.ID and d.Attempts to the stored
// values.
func (s *Store) RecordClusterRound(ctx context.Context, d *Delivery, attempts []Attempt, c ClusterRound) error {
	if d.EventSeq <= 0 {
		return fmt.Errorf("record delivery round: %w", errNoEventSeq)
	}
	var id int64
	var total int
	err := s.writeOutboxSafe(ctx, func(tx *sql.Tx) error {
		var err error
		id, total, err = recordClusterRound(tx, d, attempts, c, time.Now().UnixMilli())
		return err
	})
	if err != nil {
		return fmt.Errorf("record delivery round: %w", err)
	}
	d.ID, d.Attempts = id, total
	return nil
}

func recordClusterRound(tx *sql.Tx, d *Delivery, attempts []Attempt, c ClusterRound, now int64) (int64, int, error) {
	var next any
	if !d.NextAttemptAt.IsZero() {
		next = d.NextAttemptAt.UnixMilli()
	}
	version := int64(c.Version)
	// A newer round of the cluster, applied here meanwhile from another
	// gateway's record, is not written over (a round recorded here only,
	// version 0, is).
	upTo := version
	if upTo == 0 {
		upTo = math.MaxInt64
	}
	withLast := len(attempts)
	if c.Outcome {
		withLast = 1
	}
	var id int64
	err := tx.QueryRow(`SELECT id FROM deliveries WHERE event_seq = ? AND route = ?`, d.EventSeq, d.Route).Scan(&id)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		err = tx.QueryRow(`INSERT INTO deliveries (event_seq, route, source, event_id, event_type, idempotency_key, state,
				attempts, rounds, last_status, last_error, next_attempt_at, created_at, updated_at, version)
			VALUES (?, ?, ?, ?, coalesce(nullif(?, ''), (SELECT event_type FROM events WHERE seq = ?), ''),
				?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
			d.EventSeq, d.Route, d.Source, d.EventID, d.EventType, d.EventSeq, d.IdempotencyKey, d.State, c.Attempts, d.Rounds,
			d.LastStatus, d.LastError, next, now, now, version).Scan(&id)
	case err == nil:
		_, err = tx.Exec(`UPDATE deliveries SET
				state = CASE WHEN state = 'succeeded' THEN 'succeeded' ELSE ? END,
				attempts = max(attempts, ?), rounds = ?,
				last_status = CASE WHEN ? > 0 THEN ? ELSE last_status END,
				last_error = CASE WHEN ? > 0 THEN ? ELSE last_error END,
				next_attempt_at = ?, updated_at = ?, version = max(version, ?)
			WHERE id = ? AND version <= ?`, d.State, c.Attempts, d.Rounds, withLast, d.LastStatus, withLast,
			d.LastError, next, now, version, id, upTo)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("delivery: %w", err)
	}
	rec := RoundRecord{Origin: c.Origin, Version: c.Version, FirstAttempt: c.FirstAttempt}
	var nextAt sql.NullInt64
	err = tx.QueryRow(`SELECT route, source, event_id, event_type, idempotency_key, state, attempts, rounds,
			last_status, last_error, next_attempt_at, created_at, updated_at FROM deliveries WHERE id = ?`, id).Scan(
		&rec.Route, &rec.Source, &rec.EventID, &rec.EventType, &rec.IdempotencyKey, &rec.State, &rec.Attempts,
		&rec.Rounds, &rec.LastStatus, &rec.LastError, &nextAt, &rec.CreatedAt, &rec.UpdatedAt)
	if err != nil {
		return 0, 0, fmt.Errorf("delivery: %w", err)
	}
	rec.NextAttemptAt = nextAt.Int64
	for i := range attempts {
		a := &attempts[i]
		if _, err := tx.Exec(`INSERT INTO attempts (delivery_id, attempt, started_at, duration_ms, status, error, response)
			VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (delivery_id, attempt) DO NOTHING`,
			id, c.FirstAttempt+i, a.StartedAt.UnixMilli(), a.Duration.Milliseconds(), a.Status, a.Error, a.Response); err != nil {
			return 0, 0, fmt.Errorf("insert attempt: %w", err)
		}
		rec.AttemptList = append(rec.AttemptList, RecordAttempt{StartedAt: a.StartedAt.UnixMilli(),
			DurationMS: a.Duration.Milliseconds(), Status: a.Status, Error: a.Error, Response: a.Response})
	}
	if c.Version > 0 {
		data, err := json.Marshal(&rec)
		if err != nil {
			return 0, 0, err
		}
		msgID := "round:" + rec.IdempotencyKey + ":" + strconv.FormatUint(c.Version, 10)
		if _, err := tx.Exec(`INSERT INTO records_out (msg_id, subject, data) VALUES (?, ?, ?)`,
			msgID, RoundRecordSubject, data); err != nil {
			return 0, 0, fmt.Errorf("records outbox: %w", err)
		}
	}
	return id, rec.Attempts, nil
}

// RecordClusterState records a state change of the cluster's with its
// record (rec names the delivery): an operator's reset put back by a
// round that sent nothing, its local row changed already. The delivery
// takes rec's version and rec goes to records_out, in one transaction;
// none is written for a delivery not stored here.
func (s *Store) RecordClusterState(ctx context.Context, rec *StateRecord) error {
	err := s.writeOutboxSafe(ctx, func(tx *sql.Tx) error {
		var id int64
		err := tx.QueryRow(`SELECT id FROM deliveries WHERE event_seq = (SELECT seq FROM events WHERE source = ? AND event_id = ?)
			AND route = ?`, rec.Source, rec.EventID, rec.Route).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		return stateOut(tx, id, rec, time.Now().UnixMilli())
	})
	if err != nil {
		return fmt.Errorf("record delivery state: %w", err)
	}
	return nil
}

// stateOut raises delivery id's version to rec's and puts rec in
// records_out, with the row's state, identity and creation time, at now
// (unix ms).
func stateOut(tx *sql.Tx, id int64, rec *StateRecord, now int64) error {
	out := *rec
	err := tx.QueryRow(`UPDATE deliveries SET version = max(version, ?) WHERE id = ?
		RETURNING route, source, event_id, event_type, idempotency_key, state, created_at`, int64(rec.Version), id).Scan(
		&out.Route, &out.Source, &out.EventID, &out.EventType, &out.IdempotencyKey, &out.State, &out.CreatedAt)
	if err != nil {
		return fmt.Errorf("delivery: %w", err)
	}
	out.UpdatedAt = now
	data, err := json.Marshal(&out)
	if err != nil {
		return err
	}
	msgID := "state:" + out.IdempotencyKey + ":" + strconv.FormatUint(out.Version, 10)
	if _, err := tx.Exec(`INSERT INTO records_out (msg_id, subject, data) VALUES (?, ?, ?)`,
		msgID, StateRecordSubject, data); err != nil {
		return fmt.Errorf("records outbox: %w", err)
	}
	return nil
}

// OutRecord is a record waiting in records_out to be published.
type OutRecord struct {
	ID      int64
	MsgID   string
	Subject string
	Data    []byte
}

// RecordsOut returns up to limit records waiting to be published, oldest
// first.
func (s *Store) RecordsOut(ctx context.Context, limit int) ([]OutRecord, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, msg_id, subject, data FROM records_out ORDER BY id LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("%w: records outbox: %w", ErrUnavailable, err)
	}
	defer rows.Close()
	var out []OutRecord
	for rows.Next() {
		var r OutRecord
		if err := rows.Scan(&r.ID, &r.MsgID, &r.Subject, &r.Data); err != nil {
			return nil, fmt.Errorf("%w: records outbox: %w", ErrUnavailable, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%w: records outbox: %w", ErrUnavailable, err)
	}
	return out, nil
}

// DeleteRecordsOut takes published records out of records_out.
func (s *Store) DeleteRecordsOut(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	err := s.writeOutboxSafe(ctx, func(tx *sql.Tx) error {
		for _, id := range ids {
			if _, err := tx.Exec(`DELETE FROM records_out WHERE id = ?`, id); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("records outbox: %w", err)
	}
	return nil
}

// CountRecordsOut is the number of records waiting to be published.
func (s *Store) CountRecordsOut(ctx context.Context) (int64, error) {
	var n int64
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM records_out`).Scan(&n); err != nil {
		return 0, fmt.Errorf("%w: records outbox: %w", ErrUnavailable, err)
	}
	return n, nil
}
