package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Event is one inbound webhook as stored.
type Event struct {
	Seq         int64 // assigned by Claim (or AdoptEvent); intake order; never reused
	Source      string
	ID          string
	Type        string
	ContentType string
	Headers     []byte // JSON object of the headers worth keeping
	Body        []byte
	ReceivedAt  time.Time
	PublishedAt time.Time // zero while in the outbox
	// RequeuedAt is when Requeue put the event back in the outbox to be
	// published anew (Unpublished reads it; zero otherwise): its message
	// then goes under a Nats-Msg-Id of its own (jetstream.EventMsgID).
	RequeuedAt time.Time
}

type stmts struct {
	claim, enqueue                 *sql.Stmt // a task's claim (insertEvent); Claim's is rawWriter's
	savepoint, release, rollbackTo *sql.Stmt
}

func (p *stmts) prepare(ctx context.Context, db *sql.DB) error {
	var err error
	if p.claim, err = db.PrepareContext(ctx, claimSQL); err != nil {
		return err
	}
	if p.enqueue, err = db.PrepareContext(ctx, enqueueSQL); err != nil {
		return err
	}
	if p.savepoint, err = db.PrepareContext(ctx, `SAVEPOINT op`); err != nil {
		return err
	}
	if p.release, err = db.PrepareContext(ctx, `RELEASE op`); err != nil {
		return err
	}
	p.rollbackTo, err = db.PrepareContext(ctx, `ROLLBACK TO op`)
	return err
}

func (p *stmts) close() {
	for _, s := range []*sql.Stmt{p.claim, p.enqueue, p.savepoint, p.release, p.rollbackTo} {
		if s != nil {
			s.Close()
		}
	}
}

// Claim stores ev unless an event with the same (Source, ID) is already
// stored. It returns once the outcome is durably committed: dup is false and
// ev.Seq set when ev was stored now (and put in the outbox in the same
// transaction), dup is true when it was already there.
// Two concurrent claims of one event can never both return dup == false.
// A claim that finds the write queue full waits for room until ctx ends or
// claimQueueWait passes (context.DeadlineExceeded); a claim that finds room
// makes no timer.
func (s *Store) Claim(ctx context.Context, ev *Event) (dup bool, err error) {
	if ev.Headers == nil {
		ev.Headers = []byte("{}")
	}
	// The writer runs the claim (see commit) and is done with ev when
	// submit returns: ev's bytes may be reused after Claim.
	o := getOp()
	o.claim = ev
	err = s.submitWithin(ctx, o, claimQueueWait)
	dup = o.dup
	putOp(o)
	if err != nil {
		return false, fmt.Errorf("claim %s/%s: %w", ev.Source, ev.ID, err)
	}
	return dup, nil
}

// claimQueueWait bounds how long a claim waits for room in a full write
// queue.
var claimQueueWait = 30 * time.Second

// insertEvent runs the claim statement for ev: dup if its (source, id) is
// taken, else ev.Seq is set to its new row's and enqueue puts it in the
// outbox. The caller's transaction must not commit the one without the
// other: on an error it rolls back (the writer, the whole batch) or back to
// its savepoint. (Not a trigger: a claim that writes two tables would keep a
// statement journal; see migration 0008.)
func insertEvent(claim, enqueue *sql.Stmt, ev *Event) (dup bool, err error) {
	seq, ok, err := inserted(claim.Exec(ev.Source, ev.ID, ev.Type, ev.ContentType,
		ev.Headers, ev.Body, ev.ReceivedAt.UnixMilli()))
	if !ok || err != nil {
		return !ok, err
	}
	if _, err := enqueue.Exec(seq); err != nil {
		return false, fmt.Errorf("outbox: %w", err)
	}
	ev.Seq = seq
	return false, nil
}

// Unpublished returns up to limit events still in the outbox with Seq >
// after, in intake order, with what their messages carry (not Headers).
//
// The newest events usually come from memory (see tail): copies the writer
// kept of the claims it committed.
func (s *Store) Unpublished(ctx context.Context, after int64, limit int) ([]Event, error) {
	if evs, ok := s.tail.read(after, limit); ok {
		return evs, nil
	}
	gen := s.tail.arm()
	evs, err := s.queryUnpublished(ctx, after, limit)
	if err == nil && len(evs) < limit {
		floor := after
		if len(evs) > 0 {
			floor = evs[len(evs)-1].Seq
		}
		s.tail.armed(gen, floor)
	}
	return evs, err
}

func (s *Store) queryUnpublished(ctx context.Context, after int64, limit int) ([]Event, error) {
	rows, err := s.r.QueryContext(ctx, `
		SELECT e.seq, e.source, e.event_id, e.event_type, e.content_type, e.body, e.received_at, o.requeued_at
		FROM outbox o CROSS JOIN events e ON e.seq = o.seq
		WHERE o.seq > ? ORDER BY o.seq LIMIT ?`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("%w: unpublished: %w", ErrUnavailable, err)
	}
	defer rows.Close()
	var evs []Event
	for rows.Next() {
		var ev Event
		var received int64
		var requeued sql.NullInt64
		if err := rows.Scan(&ev.Seq, &ev.Source, &ev.ID, &ev.Type, &ev.ContentType,
			&ev.Body, &received, &requeued); err != nil {
			return nil, fmt.Errorf("%w: unpublished: %w", ErrUnavailable, err)
		}
		ev.ReceivedAt = time.UnixMilli(received)
		if requeued.Valid {
			ev.RequeuedAt = time.UnixMilli(requeued.Int64)
		}
		evs = append(evs, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%w: unpublished: %w", ErrUnavailable, err)
	}
	return evs, nil
}

// Published is an event's intake sequence and the stream sequence
// JetStream acknowledged it with.
type Published struct{ Seq, StreamSeq int64 }

// MarkPublished takes acknowledged events out of the outbox and records
// their stream sequences. An event no longer in the outbox (already marked,
// or gone) is left as it is.
func (s *Store) MarkPublished(ctx context.Context, acks []Published, at time.Time) error {
	if len(acks) == 0 {
		return nil
	}
	// The writer runs it (see commit), without a savepoint; it never adds
	// to the outbox, so the relay's in-memory tail stays in use.
	o := getOp()
	o.published, o.now, o.outboxSafe = acks, at.UnixMilli(), true
	err := s.submit(ctx, o)
	putOp(o)
	return err
}

// changed reports whether a statement changed a row, from Exec's results.
func changed(r sql.Result, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	n, err := r.RowsAffected()
	return n > 0, err
}

// inserted tells whether an INSERT … ON CONFLICT DO NOTHING added its row,
// and the row's rowid if it did.
func inserted(r sql.Result, err error) (rowid int64, ok bool, _ error) {
	if ok, err = changed(r, err); !ok || err != nil {
		return 0, false, err
	}
	rowid, err = r.LastInsertId()
	return rowid, err == nil, err
}

// AdoptEvent returns the seq of the event of ev.Source and ev.ID in this
// store, storing ev first if there is none: for a message in the stream
// whose Hookgate-Seq is not its event's here (published before this
// store was replaced, or a copy of an event retention has since pruned).
// An adopted event is stored as published (the message is in the stream;
// streamSeq is its stream sequence), not put in the outbox, so its
// deliveries are recorded and retention handles it like any other. A zero
// ev.ReceivedAt is taken as now. stored reports whether ev was stored now.
func (s *Store) AdoptEvent(ctx context.Context, ev *Event, streamSeq int64) (seq int64, stored bool, err error) {
	const bySourceID = `SELECT seq FROM events WHERE source = ? AND event_id = ?`
	err = s.r.QueryRowContext(ctx, bySourceID, ev.Source, ev.ID).Scan(&seq)
	if err == nil {
		return seq, false, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return 0, false, fmt.Errorf("%w: adopt event: %w", ErrUnavailable, err)
	}
	// It adds nothing to the outbox, so the relay's in-memory tail stays in
	// use.
	err = s.writeOutboxSafe(ctx, func(tx *sql.Tx) error {
		stored = false
		err := tx.QueryRow(bySourceID, ev.Source, ev.ID).Scan(&seq) // claimed meanwhile
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		stored = true
		headers := ev.Headers
		if len(headers) == 0 {
			headers = []byte("{}")
		}
		now := time.Now().UnixMilli()
		received := now
		if !ev.ReceivedAt.IsZero() {
			received = ev.ReceivedAt.UnixMilli()
		}
		if err := tx.QueryRow(`INSERT INTO events (source, event_id, event_type, content_type, headers, body, received_at)
			VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING seq`, ev.Source, ev.ID, ev.Type, ev.ContentType, headers,
			ev.Body, received).Scan(&seq); err != nil {
			return err
		}
		_, err = tx.Exec(`INSERT INTO published (seq, stream_seq, published_at) VALUES (?, ?, ?)`, seq, streamSeq, now)
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("adopt event: %w", err)
	}
	return seq, stored, nil
}

// GetEvent returns one stored event.
func (s *Store) GetEvent(ctx context.Context, source, id string) (*Event, error) {
	return s.getEvent(ctx, `e.source = ? AND e.event_id = ?`, source, id)
}

// EventBySeq returns the stored event of an intake sequence (a
// delivery's EventSeq).
func (s *Store) EventBySeq(ctx context.Context, seq int64) (*Event, error) {
	return s.getEvent(ctx, `e.seq = ?`, seq)
}

func (s *Store) getEvent(ctx context.Context, where string, args ...any) (*Event, error) {
	var ev Event
	var received int64
	var published sql.NullInt64
	err := s.r.QueryRowContext(ctx, `
		SELECT e.seq, e.source, e.event_id, e.event_type, e.content_type, e.headers, e.body, e.received_at, p.published_at
		FROM events e LEFT JOIN published p ON p.seq = e.seq
		WHERE `+where, args...).Scan(
		&ev.Seq, &ev.Source, &ev.ID, &ev.Type, &ev.ContentType, &ev.Headers, &ev.Body, &received, &published)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("%w: get event: %w", ErrUnavailable, err)
	}
	ev.ReceivedAt = time.UnixMilli(received)
	if published.Valid {
		ev.PublishedAt = time.UnixMilli(published.Int64)
	}
	return &ev, nil
}

// ErrNotFound is returned by lookups that found nothing.
var ErrNotFound = errors.New("not found")

// HasOwnEvents reports whether the store holds an event of its own intake:
// published from here or still in the outbox (not another gateway's copy
// from the records).
func (s *Store) HasOwnEvents(ctx context.Context) (bool, error) {
	var own bool
	err := s.r.QueryRowContext(ctx, `
		SELECT EXISTS (SELECT 1 FROM published) OR EXISTS (SELECT 1 FROM outbox)`).Scan(&own)
	if err != nil {
		return false, fmt.Errorf("%w: own events: %w", ErrUnavailable, err)
	}
	return own, nil
}

// Counts reports how many events are stored and how many are still in the
// outbox.
func (s *Store) Counts(ctx context.Context) (total, unpublished int64, err error) {
	err = s.r.QueryRowContext(ctx, `
		SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM outbox)`).Scan(&total, &unpublished)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: counts: %w", ErrUnavailable, err)
	}
	return total, unpublished, nil
}
