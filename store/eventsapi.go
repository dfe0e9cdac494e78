package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// EventCursor is a position in this store's receipt order, (ReceivedAt,
// Seq): where retention's walk goes on from.
type EventCursor struct {
	ReceivedAt int64 // unix ms
	Seq        int64
}

// EventFilter selects events for ListEvents.
type EventFilter struct {
	Source, Type string
	Since        time.Time        // zero: from the oldest
	ExcludeTasks bool             // leave out task events (source TaskSource)
	After        *EventListCursor // only events after this position
	Limit        int
}

// EventSummary is an event without its body and headers.
type EventSummary struct {
	Seq         int64     `json:"seq"`
	Source      string    `json:"source"`
	EventID     string    `json:"event_id"`
	EventType   string    `json:"event_type"`
	ContentType string    `json:"content_type"`
	Size        int64     `json:"size"`
	ReceivedAt  time.Time `json:"received_at"`
	PublishedAt time.Time `json:"published_at,omitzero"`
}

// Cursor is the summary's position in receipt order.
func (e *EventSummary) Cursor() EventListCursor {
	return EventListCursor{ReceivedAt: e.ReceivedAt.UnixMilli(), Source: e.Source, EventID: e.EventID}
}

// ListEvents returns events matching f in receipt order, oldest first
// (received_at, then source and event ID: the same order on every gateway).
// It walks the receipt-time index, sorting only events received in the same
// millisecond; source and type are filters on that walk.
func (s *Store) ListEvents(ctx context.Context, f EventFilter) ([]EventSummary, error) {
	var where []string
	var args []any
	if f.After != nil {
		// received_at alone bounds the index walk.
		where = append(where, "received_at >= ? AND (received_at > ? OR (source, event_id) > (?, ?))")
		args = append(args, f.After.ReceivedAt, f.After.ReceivedAt, f.After.Source, f.After.EventID)
	}
	if !f.Since.IsZero() {
		where = append(where, "received_at >= ?")
		args = append(args, f.Since.UnixMilli())
	}
	if f.Source != "" {
		// '+' keeps the planner on the receipt-time index instead of
		// sorting a whole source out of the dedup index.
		where = append(where, "+source = ?")
		args = append(args, f.Source)
	}
	if f.ExcludeTasks {
		where = append(where, "+source != ?")
		args = append(args, TaskSource)
	}
	if f.Type != "" {
		where = append(where, "+event_type = ?")
		args = append(args, f.Type)
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	q := `SELECT e.seq, e.source, e.event_id, e.event_type, e.content_type, length(e.body), e.received_at,
			(SELECT p.published_at FROM published p WHERE p.seq = e.seq)
		FROM events e INDEXED BY events_received`
	if len(where) > 0 {
		//nolint:gosec // G202: where joins the constant conditions above; every value is a bound argument
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY received_at, source, event_id LIMIT ?`
	args = append(args, f.Limit)
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%w: list events: %w", ErrUnavailable, err)
	}
	defer rows.Close()
	var out []EventSummary
	for rows.Next() {
		var e EventSummary
		var received int64
		var published sql.NullInt64
		if err := rows.Scan(&e.Seq, &e.Source, &e.EventID, &e.EventType, &e.ContentType, &e.Size,
			&received, &published); err != nil {
			return nil, fmt.Errorf("%w: list events: %w", ErrUnavailable, err)
		}
		e.ReceivedAt = time.UnixMilli(received)
		if published.Valid {
			e.PublishedAt = time.UnixMilli(published.Int64)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%w: list events: %w", ErrUnavailable, err)
	}
	return out, nil
}

// ResetDelivery sets the delivery of event d.EventSeq to d.Route to
// pending, whatever its state (succeeded included), creating it if there
// is none: for an operator's replay (noting the reset: see
// PendingDeliveries). The Idempotency-Key of an existing delivery is kept.
// It returns the delivery as stored.
func (s *Store) ResetDelivery(ctx context.Context, d *Delivery, rec *StateRecord) (*Delivery, error) {
	if d.EventSeq <= 0 {
		return nil, fmt.Errorf("reset delivery: %w", errNoEventSeq)
	}
	now := time.Now().UnixMilli()
	var id int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRow(`
			INSERT INTO deliveries (event_seq, route, source, event_id, event_type, idempotency_key, state,
				created_at, updated_at, reset_at)
			VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?)
			ON CONFLICT (event_seq, route) DO UPDATE SET
				state = 'pending', next_attempt_at = NULL, updated_at = excluded.updated_at, reset_at = excluded.reset_at
			RETURNING id`,
			d.EventSeq, d.Route, d.Source, d.EventID, d.EventType, d.IdempotencyKey, now, now, now).Scan(&id)
		if err != nil || rec == nil {
			return err
		}
		return stateOut(tx, id, rec, now)
	})
	if err != nil {
		return nil, fmt.Errorf("reset delivery: %w", err)
	}
	return s.DeliveryByID(ctx, id)
}

// OutboxBacklog is the number of events not yet acknowledged by JetStream.
// It reads the outbox table only, so it costs what the backlog is, not
// what the events table is.
func (s *Store) OutboxBacklog(ctx context.Context) (int64, error) {
	var n int64
	err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM outbox`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("%w: outbox backlog: %w", ErrUnavailable, err)
	}
	return n, nil
}
