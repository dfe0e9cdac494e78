package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// In cluster mode every gateway's store is a replica of the cluster's
// record: the events and delivery rounds of every gateway reach it as
// records through a JetStream stream (package cluster), and ApplyRecords
// writes them here. Single-node mode writes none of these tables.

// Subjects of the records stream's messages.
const (
	EventRecordSubject = "hookgate.records.event"
	RoundRecordSubject = "hookgate.records.round"
	StateRecordSubject = "hookgate.records.state"
)

// EventRecord is an accepted event as the records stream carries it: this
// JSON in a header, the body as the message's data.
type EventRecord struct {
	Origin      string          `json:"origin"` // the gateway holding the event's claim
	Source      string          `json:"source"`
	ID          string          `json:"id"`
	Type        string          `json:"type,omitempty"`
	ContentType string          `json:"content_type,omitempty"`
	Headers     json.RawMessage `json:"headers,omitempty"`
	ReceivedAt  int64           `json:"received_at"`     // unix ms
	Scope       string          `json:"scope,omitempty"` // a task's owner (source TaskSource)
	Body        []byte          `json:"-"`
}

// RoundRecord is a delivery as it stands after a round, as the records
// stream carries it (JSON): the delivery's row and the round's attempts.
type RoundRecord struct {
	Origin         string `json:"origin"`
	Route          string `json:"route"`
	Source         string `json:"source"`
	EventID        string `json:"event_id"`
	EventType      string `json:"event_type,omitempty"`
	IdempotencyKey string `json:"idempotency_key"`
	State          string `json:"state"`
	Attempts       int    `json:"attempts"` // in the whole cluster
	Rounds         int    `json:"rounds"`
	LastStatus     int    `json:"last_status,omitempty"`
	LastError      string `json:"last_error,omitempty"`
	NextAttemptAt  int64  `json:"next_attempt_at,omitempty"` // unix ms
	CreatedAt      int64  `json:"created_at"`
	UpdatedAt      int64  `json:"updated_at"`
	// Version orders a delivery's records: the revision of its entry in
	// the cluster's delivery-state bucket that the round wrote.
	Version uint64 `json:"version"`
	// FirstAttempt is the number of AttemptList's first attempt.
	FirstAttempt int             `json:"first_attempt,omitempty"`
	AttemptList  []RecordAttempt `json:"attempt_list,omitempty"`
}

// RecordAttempt is one attempt in a RoundRecord.
type RecordAttempt struct {
	StartedAt  int64  `json:"started_at"` // unix ms
	DurationMS int64  `json:"duration_ms"`
	Status     int    `json:"status,omitempty"`
	Error      string `json:"error,omitempty"`
	Response   []byte `json:"response,omitempty"`
}

// StateRecord is a delivery's state changed by an operator without a
// round, as the records stream carries it (JSON): a retry's or replay's
// reset to pending, or a reset put back by an operator's round that sent
// nothing. Its counts are the cluster's entry as the change wrote it.
type StateRecord struct {
	Origin         string `json:"origin"`
	Route          string `json:"route"`
	Source         string `json:"source"`
	EventID        string `json:"event_id"`
	EventType      string `json:"event_type,omitempty"`
	IdempotencyKey string `json:"idempotency_key"`
	State          string `json:"state"`
	Attempts       int    `json:"attempts"` // in the whole cluster
	Rounds         int    `json:"rounds"`
	LastStatus     int    `json:"last_status,omitempty"`
	NextAttemptAt  int64  `json:"next_attempt_at,omitempty"` // unix ms
	CreatedAt      int64  `json:"created_at"`
	UpdatedAt      int64  `json:"updated_at"`
	// Version is the revision the change wrote in the cluster's
	// delivery-state bucket: a delivery's records apply in its order,
	// rounds' and changes' alike.
	Version uint64 `json:"version"`
}

// Record is one message of the records stream: an event, a round, or a
// state changed without a round.
type Record struct {
	Event *EventRecord
	Round *RoundRecord
	State *StateRecord
}

// metaRecordsPosition is the meta key of the last stream sequence applied.
const metaRecordsPosition = "records_position"

// RecordsPosition is the stream sequence of the last record applied (0:
// none yet).
func (s *Store) RecordsPosition(ctx context.Context) (uint64, error) {
	v, err := s.Meta(ctx, metaRecordsPosition)
	if err != nil || v == "" {
		return 0, err
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("records position %q: %w", v, err)
	}
	return n, nil
}

// metaRecordsStream is the meta key of the creation time of the records
// stream the position counts in.
const metaRecordsStream = "records_stream"

// RecordsStream is the creation time (RFC 3339) of the records stream
// RecordsPosition counts in; "" before it was noted.
func (s *Store) RecordsStream(ctx context.Context) (string, error) {
	return s.Meta(ctx, metaRecordsStream)
}

// SetRecordsStream notes the records stream's creation time; with reset,
// in the same transaction, the position goes back to 0 (a stream made
// anew: its sequences are not the old one's).
func (s *Store) SetRecordsStream(ctx context.Context, created string, reset bool) error {
	return s.writeOutboxSafe(ctx, func(tx *sql.Tx) error {
		if err := setMeta(tx, metaRecordsStream, created); err != nil || !reset {
			return err
		}
		return setMeta(tx, metaRecordsPosition, "0")
	})
}

// ApplyRecords writes records from other gateways and the stream sequence
// through which they were read, in one transaction: each record is applied
// once, however often the stream is read again.
//
// An event unknown here is stored as its origin's (in replica_events;
// never in the outbox nor published: its origin publishes it), and the
// deliveries of it already applied are linked to it; a known one (an adopted copy, or one
// refused here) takes the record's type, content type, headers, body and
// receipt time. A round is
// applied only when its Version is newer than the row's; a delivery of an
// event not known yet is kept under a negative event_seq until the event
// arrives. Attempts are inserted by their cluster-wide numbers, once. A
// state record is applied as a round is, by its Version, changing the
// state, attempts, rounds and next attempt (a delivery unknown here is
// made from it).
func (s *Store) ApplyRecords(ctx context.Context, recs []Record, through uint64) error {
	err := s.writeOutboxSafe(ctx, func(tx *sql.Tx) error {
		for _, r := range recs {
			var err error
			switch {
			case r.Event != nil:
				err = applyEvent(tx, r.Event)
			case r.Round != nil:
				err = applyRound(tx, r.Round)
			case r.State != nil:
				err = applyState(tx, r.State)
			}
			if err != nil {
				return err
			}
		}
		return setMeta(tx, metaRecordsPosition, strconv.FormatUint(through, 10))
	})
	if err != nil {
		return fmt.Errorf("apply records through %d: %w", through, err)
	}
	return nil
}

// eventSeq is the seq of (source, id) here; found is false if unknown.
func eventSeq(tx *sql.Tx, source, id string) (seq int64, found bool, err error) {
	err = tx.QueryRow(`SELECT seq FROM events WHERE source = ? AND event_id = ?`, source, id).Scan(&seq)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return seq, err == nil, err
}

func applyEvent(tx *sql.Tx, e *EventRecord) error {
	seq, found, err := eventSeq(tx, e.Source, e.ID)
	if err != nil {
		return fmt.Errorf("event record %s/%s: %w", e.Source, e.ID, err)
	}
	headers := []byte(e.Headers)
	if len(headers) == 0 {
		headers = []byte("{}")
	}
	body := e.Body
	if body == nil {
		body = []byte{}
	}
	if found {
		// The holder's copy is the one delivered (a task's copy here may
		// be another request under the same key).
		if _, err := tx.Exec(`UPDATE events SET event_type = ?, content_type = ?, headers = ?, body = ?, received_at = ?
			WHERE seq = ?`, e.Type, e.ContentType, headers, body, e.ReceivedAt, seq); err != nil {
			return fmt.Errorf("event record %s/%s: %w", e.Source, e.ID, err)
		}
	} else {
		err := tx.QueryRow(`INSERT INTO events (source, event_id, event_type, content_type, headers, body, received_at)
			VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING seq`, e.Source, e.ID, e.Type, e.ContentType, headers, body,
			e.ReceivedAt).Scan(&seq)
		if err != nil {
			return fmt.Errorf("event record %s/%s: %w", e.Source, e.ID, err)
		}
	}
	if err := linkDeliveries(tx, seq, e.Source, e.ID); err != nil {
		return fmt.Errorf("event record %s/%s: link deliveries: %w", e.Source, e.ID, err)
	}
	if _, err := tx.Exec(`INSERT INTO replica_events (seq, origin) VALUES (?, ?)
		ON CONFLICT (seq) DO UPDATE SET origin = excluded.origin`, seq, e.Origin); err != nil {
		return err
	}
	if e.Source == TaskSource && e.Scope != "" {
		if _, err := tx.Exec(`INSERT INTO tasks (id, scope, created_at) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING`,
			e.ID, e.Scope, e.ReceivedAt); err != nil {
			return fmt.Errorf("event record %s/%s: task: %w", e.Source, e.ID, err)
		}
	}
	return nil
}

// linkDeliveries moves the deliveries of (source, id) applied before
// the event was known here (kept under a negative event_seq) to the
// event's seq. The event may have come here another way first (adopted
// from the stream, or a sender's copy), and a round run here may have
// made the route's row meanwhile: the two rows are then one, the newer
// version's state with the attempts of both.
func linkDeliveries(tx *sql.Tx, seq int64, source, id string) error {
	type orphan struct {
		id      int64
		route   string
		version int64
	}
	rows, err := tx.Query(`SELECT id, route, version FROM deliveries WHERE event_seq < 0 AND source = ? AND event_id = ?`,
		source, id)
	if err != nil {
		return err
	}
	var orphans []orphan
	for rows.Next() {
		var o orphan
		if err := rows.Scan(&o.id, &o.route, &o.version); err != nil {
			rows.Close()
			return err
		}
		orphans = append(orphans, o)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, o := range orphans {
		var keep, version int64
		err := tx.QueryRow(`SELECT id, version FROM deliveries WHERE event_seq = ? AND route = ?`, seq, o.route).Scan(&keep, &version)
		if errors.Is(err, sql.ErrNoRows) {
			if _, err := tx.Exec(`UPDATE deliveries SET event_seq = ? WHERE id = ?`, seq, o.id); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(`INSERT INTO attempts (delivery_id, attempt, started_at, duration_ms, status, error, response)
			SELECT ?, attempt, started_at, duration_ms, status, error, response FROM attempts WHERE delivery_id = ?
			ON CONFLICT (delivery_id, attempt) DO NOTHING`, keep, o.id); err != nil {
			return err
		}
		if o.version > version {
			if _, err := tx.Exec(`UPDATE deliveries SET (state, attempts, rounds, last_status, last_error, next_attempt_at,
					updated_at, version) = (SELECT state, attempts, rounds, last_status, last_error, next_attempt_at,
					updated_at, version FROM deliveries WHERE id = ?),
				created_at = min(created_at, (SELECT created_at FROM deliveries WHERE id = ?)) WHERE id = ?`,
				o.id, o.id, keep); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(`DELETE FROM attempts WHERE delivery_id = ?`, o.id); err != nil {
			return err
		}
		if _, err := tx.Exec(`DELETE FROM deliveries WHERE id = ?`, o.id); err != nil {
			return err
		}
	}
	return nil
}

// replicaDelivery finds the row of a record's delivery: its id and
// version, found false if there is none; seq is the event's here, or
// (the event unknown here) the negative seq a new row is kept under until
// its event arrives.
func replicaDelivery(tx *sql.Tx, route, source, eventID string) (id, version, seq int64, found bool, err error) {
	seq, known, err := eventSeq(tx, source, eventID)
	if err != nil {
		return 0, 0, 0, false, err
	}
	if known {
		// The event may have come here since a round was kept under -id.
		if err := linkDeliveries(tx, seq, source, eventID); err != nil {
			return 0, 0, 0, false, fmt.Errorf("link deliveries: %w", err)
		}
		err = tx.QueryRow(`SELECT id, version FROM deliveries WHERE event_seq = ? AND route = ?`, seq, route).Scan(&id, &version)
	} else {
		err = tx.QueryRow(`SELECT id, version FROM deliveries WHERE event_seq < 0 AND route = ? AND source = ? AND event_id = ?`,
			route, source, eventID).Scan(&id, &version)
	}
	switch {
	case errors.Is(err, sql.ErrNoRows) && known:
		return 0, 0, seq, false, nil
	case errors.Is(err, sql.ErrNoRows):
		// Kept under -id (the id it is about to get) until its event arrives.
		err = tx.QueryRow(`SELECT -(coalesce(max(id), 0) + 1) FROM deliveries`).Scan(&seq)
		return 0, 0, seq, false, err
	case err != nil:
		return 0, 0, 0, false, err
	}
	return id, version, seq, true, nil
}

func applyState(tx *sql.Tx, r *StateRecord) error {
	id, version, seq, found, err := replicaDelivery(tx, r.Route, r.Source, r.EventID)
	if err != nil {
		return fmt.Errorf("state record %s %s/%s: %w", r.Route, r.Source, r.EventID, err)
	}
	var next any
	if r.NextAttemptAt != 0 {
		next = r.NextAttemptAt
	}
	switch {
	case !found:
		_, err = tx.Exec(`INSERT INTO deliveries (event_seq, route, source, event_id, event_type, idempotency_key, state,
				attempts, rounds, last_status, next_attempt_at, created_at, updated_at, version)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			seq, r.Route, r.Source, r.EventID, r.EventType, r.IdempotencyKey, r.State, r.Attempts, r.Rounds,
			r.LastStatus, next, r.CreatedAt, r.UpdatedAt, int64(r.Version))
	case uint64(version) < r.Version:
		_, err = tx.Exec(`UPDATE deliveries SET state = ?, attempts = max(attempts, ?), rounds = ?, next_attempt_at = ?,
				updated_at = ?, version = ? WHERE id = ?`,
			r.State, r.Attempts, r.Rounds, next, r.UpdatedAt, int64(r.Version), id)
	}
	if err != nil {
		return fmt.Errorf("state record %s %s/%s: %w", r.Route, r.Source, r.EventID, err)
	}
	return nil
}

func applyRound(tx *sql.Tx, r *RoundRecord) error {
	id, version, seq, found, err := replicaDelivery(tx, r.Route, r.Source, r.EventID)
	if err != nil {
		return fmt.Errorf("round record %s %s/%s: %w", r.Route, r.Source, r.EventID, err)
	}
	var next any
	if r.NextAttemptAt != 0 {
		next = r.NextAttemptAt
	}
	switch {
	case !found:
		err = tx.QueryRow(`INSERT INTO deliveries (event_seq, route, source, event_id, event_type, idempotency_key, state,
				attempts, rounds, last_status, last_error, next_attempt_at, created_at, updated_at, version)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
			seq, r.Route, r.Source, r.EventID, r.EventType, r.IdempotencyKey, r.State, r.Attempts, r.Rounds,
			r.LastStatus, r.LastError, next, r.CreatedAt, r.UpdatedAt, int64(r.Version)).Scan(&id)
	case uint64(version) < r.Version:
		_, err = tx.Exec(`UPDATE deliveries SET state = ?, attempts = ?, rounds = ?, last_status = ?, last_error = ?,
				next_attempt_at = ?, created_at = min(created_at, ?), updated_at = ?, version = ? WHERE id = ?`,
			r.State, r.Attempts, r.Rounds, r.LastStatus, r.LastError, next, r.CreatedAt, r.UpdatedAt,
			int64(r.Version), id)
	}
	if err != nil {
		return fmt.Errorf("round record %s %s/%s: %w", r.Route, r.Source, r.EventID, err)
	}
	for i, a := range r.AttemptList {
		if _, err := tx.Exec(`INSERT INTO attempts (delivery_id, attempt, started_at, duration_ms, status, error, response)
			VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (delivery_id, attempt) DO NOTHING`,
			id, r.FirstAttempt+i, a.StartedAt, a.DurationMS, a.Status, a.Error, a.Response); err != nil {
			return fmt.Errorf("round record %s %s/%s: attempt: %w", r.Route, r.Source, r.EventID, err)
		}
	}
	return nil
}
