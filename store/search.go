package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// EventSearch selects events for SearchEvents. Every field but Since,
// Until and Limit may be empty.
type EventSearch struct {
	Source, Type, EventID string
	// Sources are where an EventID without a Source is looked for (the
	// configured ones): each is one lookup in the dedup index. Without
	// them, such an ID is looked for on the receipt-time walk.
	Sources      []string
	Since, Until time.Time // receipt time, [Since, Until); zero: unbounded
	// FieldPath is a JSON path ("$.data.object.id"); with it, only events
	// whose body holds FieldValue there (compared as text) match.
	FieldPath, FieldValue string
	Limit                 int // at most this many, newest first
	// ScanMax bounds the events read to evaluate FieldPath (newest first
	// in the range); 0: 10000.
	ScanMax int
}

// SearchEvents returns events matching f, newest first, task events left
// out. It walks the receipt-time index; a FieldPath is evaluated on at most
// ScanMax of the newest events in the range, and scanned reports whether
// that bound was reached (older events in the range were not searched).
// Without FieldPath, scanned is false.
func (s *Store) SearchEvents(ctx context.Context, f EventSearch) (out []EventSummary, scanned bool, err error) {
	where, args, index := f.conditions()
	if f.Limit <= 0 {
		f.Limit = 100
	}
	if f.ScanMax <= 0 {
		f.ScanMax = 10000
	}
	inner := `SELECT seq, source, event_id, event_type, content_type, body, received_at
		FROM events ` + index + ` WHERE ` + strings.Join(where, " AND ") +
		` ORDER BY received_at DESC, source DESC, event_id DESC`
	//nolint:gosec // G202: inner joins the constant conditions above; every value is a bound argument
	q := `SELECT e.seq, e.source, e.event_id, e.event_type, e.content_type, length(e.body), e.received_at,
			(SELECT p.published_at FROM published p WHERE p.seq = e.seq)
		FROM (` + inner + ` LIMIT ?) e`
	if f.FieldPath != "" {
		// Whether the scan bound cuts the range: the same walk, no bodies.
		cq := `SELECT count(*) FROM (SELECT seq FROM events ` + index + ` WHERE ` +
			strings.Join(where, " AND ") + ` LIMIT ?)`
		var n int
		if err := s.r.QueryRowContext(ctx, cq, append(args[:len(args):len(args)], f.ScanMax)...).Scan(&n); err != nil {
			return nil, false, fmt.Errorf("%w: search events: %w", ErrUnavailable, err)
		}
		scanned = n >= f.ScanMax
	}
	args = append(args, f.ScanMax)
	if f.FieldPath != "" {
		// The body is a BLOB: as text, or SQLite would read it as JSONB.
		// CASE evaluates json_valid first, so a body that is not JSON
		// does not match instead of failing the query.
		q += ` WHERE CASE WHEN json_valid(CAST(e.body AS TEXT))
			THEN CAST(json_extract(CAST(e.body AS TEXT), ?) AS TEXT) END = ?`
		args = append(args, f.FieldPath, f.FieldValue)
	}
	q += ` ORDER BY e.received_at DESC, e.source DESC, e.event_id DESC LIMIT ?`
	args = append(args, f.Limit)
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, false, fmt.Errorf("%w: search events: %w", ErrUnavailable, err)
	}
	defer rows.Close()
	for rows.Next() {
		var e EventSummary
		var received int64
		var published sql.NullInt64
		if err := rows.Scan(&e.Seq, &e.Source, &e.EventID, &e.EventType, &e.ContentType, &e.Size,
			&received, &published); err != nil {
			return nil, false, fmt.Errorf("%w: search events: %w", ErrUnavailable, err)
		}
		e.ReceivedAt = time.UnixMilli(received)
		if published.Valid {
			e.PublishedAt = time.UnixMilli(published.Int64)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("%w: search events: %w", ErrUnavailable, err)
	}
	return out, scanned, nil
}

// conditions returns the WHERE terms of f but the JSON field's, their
// arguments, and the index to walk.
func (f *EventSearch) conditions() (where []string, args []any, index string) {
	where = []string{"+source != ?"}
	args = []any{TaskSource}
	if !f.Since.IsZero() {
		where = append(where, "received_at >= ?")
		args = append(args, f.Since.UnixMilli())
	}
	if !f.Until.IsZero() {
		where = append(where, "received_at < ?")
		args = append(args, f.Until.UnixMilli())
	}
	if f.Type != "" {
		where = append(where, "+event_type = ?")
		args = append(args, f.Type)
	}
	// An ID is looked up in the dedup index under each source it may be
	// of; other searches walk the receipt-time index.
	index = "INDEXED BY events_received"
	sources := f.Sources
	if f.Source != "" {
		sources = []string{f.Source}
	}
	switch {
	case f.EventID != "" && len(sources) > 0:
		index = ""
		where = append(where, "source IN (?"+strings.Repeat(", ?", len(sources)-1)+") AND event_id = ?")
		for _, src := range sources {
			args = append(args, src)
		}
		args = append(args, f.EventID)
	case f.EventID != "":
		where = append(where, "+event_id = ?")
		args = append(args, f.EventID)
	}
	if f.Source != "" && f.EventID == "" {
		where = append(where, "+source = ?")
		args = append(args, f.Source)
	}
	return where, args, index
}
