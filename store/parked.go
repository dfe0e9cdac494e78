package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// ParkedEvent is an event the broker refused for its content, set aside
// from the outbox.
type ParkedEvent struct {
	Seq        int64     `json:"seq"`
	Source     string    `json:"source"`
	ID         string    `json:"event_id"`
	Type       string    `json:"event_type"`
	Size       int       `json:"size"` // body bytes
	Reason     string    `json:"reason"`
	ReceivedAt time.Time `json:"received_at"`
	ParkedAt   time.Time `json:"parked_at"`
}

// Park takes an event out of the outbox and sets it aside with the
// broker's reason; the events behind it are published meanwhile. An event
// no longer in the outbox is left as it is.
func (s *Store) Park(ctx context.Context, seq int64, reason string, at time.Time) error {
	return s.writeOutboxSafe(ctx, func(tx *sql.Tx) error {
		was, err := changed(tx.Exec(`DELETE FROM outbox WHERE seq = ?`, seq))
		if err != nil || !was {
			return err
		}
		_, err = tx.Exec(`INSERT INTO parked (seq, reason, parked_at) VALUES (?, ?, ?)
			ON CONFLICT (seq) DO UPDATE SET reason = excluded.reason, parked_at = excluded.parked_at`,
			seq, reason, at.UnixMilli())
		return err
	})
}

// Parked lists parked events in intake order, after seq after, at most
// limit of them.
func (s *Store) Parked(ctx context.Context, after int64, limit int) ([]ParkedEvent, error) {
	rows, err := s.r.QueryContext(ctx, `
		SELECT p.seq, e.source, e.event_id, e.event_type, length(e.body), p.reason, e.received_at, p.parked_at
		FROM parked p CROSS JOIN events e ON e.seq = p.seq
		WHERE p.seq > ? ORDER BY p.seq LIMIT ?`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("%w: parked: %w", ErrUnavailable, err)
	}
	defer rows.Close()
	out := []ParkedEvent{}
	for rows.Next() {
		var p ParkedEvent
		var received, parked int64
		if err := rows.Scan(&p.Seq, &p.Source, &p.ID, &p.Type, &p.Size, &p.Reason, &received, &parked); err != nil {
			return nil, fmt.Errorf("%w: parked: %w", ErrUnavailable, err)
		}
		p.ReceivedAt, p.ParkedAt = time.UnixMilli(received).UTC(), time.UnixMilli(parked).UTC()
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%w: parked: %w", ErrUnavailable, err)
	}
	return out, nil
}

// Unpark puts a parked event back in the outbox, to be published again
// (e.g. once the broker's max payload was raised). ErrNotFound if seq is
// not parked.
func (s *Store) Unpark(ctx context.Context, seq int64) error {
	var found bool
	err := s.write(ctx, func(tx *sql.Tx) error {
		was, err := changed(tx.Exec(`DELETE FROM parked WHERE seq = ?`, seq))
		if found = was; err != nil || !was {
			return err
		}
		_, err = tx.Exec(`INSERT INTO outbox (seq) VALUES (?)`, seq)
		return err
	})
	if err != nil {
		return fmt.Errorf("unpark %d: %w", seq, err)
	}
	if !found {
		return ErrNotFound
	}
	return nil
}

// OutboxOldest returns when the oldest event still in the outbox was
// received; ok is false when the outbox is empty.
func (s *Store) OutboxOldest(ctx context.Context) (at time.Time, ok bool, err error) {
	var received int64
	err = s.probe.QueryRowContext(ctx, `
		SELECT e.received_at FROM outbox o CROSS JOIN events e ON e.seq = o.seq
		ORDER BY o.seq LIMIT 1`).Scan(&received)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("%w: oldest outbox event: %w", ErrUnavailable, err)
	}
	return time.UnixMilli(received), true, nil
}
