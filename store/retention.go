package store

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"time"

	"github.com/hookgate/hookgate/internal/startstop"
)

// PruneResult counts the rows a prune deleted.
type PruneResult struct {
	Events, Deliveries, Attempts, Keys int
}

func (r *PruneResult) add(o PruneResult) {
	r.Events += o.Events
	r.Deliveries += o.Deliveries
	r.Attempts += o.Attempts
	r.Keys += o.Keys
}

// OldEvent is an event past its retention, as PruneEvents shows it to the
// keep callback: with the routes whose delivery of it is finished
// (Terminal) and those whose delivery is not (Open).
type OldEvent struct {
	Seq              int64
	Source, ID, Type string
	ReceivedAt       time.Time
	Terminal, Open   map[string]bool
}

// KeepOpen is the default keep rule: an event stays while any of its
// deliveries is not finished.
func KeepOpen(ev *OldEvent) bool { return len(ev.Open) > 0 }

// PruneEvents deletes, in one write, events received before before and
// after the cursor, in receipt order, at most limit of them looked at;
// with each event its deliveries and their attempts (and, for a task, its
// task record). An event still in the outbox is never deleted, nor the
// newest event (SQLite would give its seq to the next claim, and a seq
// names one event for good: deliveries are keyed by it, and a copy of
// the old event's message may still be in the stream), nor one keep(ev)
// says to keep (nil keep: KeepOpen). The deliveries are read
// inside the write, so a delivery reset by an operator at the same moment
// is seen.
//
// next is where the following call continues; more is false once no
// event before before remains past it.
func (s *Store) PruneEvents(ctx context.Context, before time.Time, after EventCursor, limit int,
	keep func(ev *OldEvent) bool) (res PruneResult, next EventCursor, more bool, err error) {
	if keep == nil {
		keep = KeepOpen
	}
	if limit <= 0 {
		limit = 500
	}
	next = after
	err = s.write(ctx, func(tx *sql.Tx) error {
		res, next, more = PruneResult{}, after, false
		rows, err := tx.Query(`SELECT e.seq, e.source, e.event_id, e.event_type, e.received_at,
				NOT EXISTS (SELECT 1 FROM outbox o WHERE o.seq = e.seq),
				EXISTS (SELECT 1 FROM claimed_elsewhere x WHERE x.seq = e.seq)
					AND NOT EXISTS (SELECT 1 FROM replica_events r WHERE r.seq = e.seq)
			FROM events e INDEXED BY events_received
			WHERE e.received_at < ? AND (e.received_at, e.seq) > (?, ?)
			ORDER BY e.received_at, e.seq LIMIT ?`, before.UnixMilli(), after.ReceivedAt, after.Seq, limit)
		if err != nil {
			return err
		}
		type candidate struct {
			ev        OldEvent
			published bool
			// Claimed by another gateway and no record of it applied here:
			// nothing to deliver, nothing to learn of its deliveries here.
			elsewhere bool
		}
		var cands []candidate
		for rows.Next() {
			var c candidate
			var received int64
			if err := rows.Scan(&c.ev.Seq, &c.ev.Source, &c.ev.ID, &c.ev.Type, &received, &c.published, &c.elsewhere); err != nil {
				rows.Close()
				return err
			}
			c.ev.ReceivedAt = time.UnixMilli(received)
			next = EventCursor{ReceivedAt: received, Seq: c.ev.Seq}
			cands = append(cands, c)
		}
		if err := rows.Err(); err != nil { // not a short page
			rows.Close()
			return err
		}
		if err := rows.Close(); err != nil {
			return err
		}
		more = len(cands) == limit
		var newest int64
		if err := tx.QueryRow(`SELECT coalesce(max(seq), 0) FROM events`).Scan(&newest); err != nil {
			return err
		}
		for i := range cands {
			c := &cands[i]
			if !c.published || c.ev.Seq == newest {
				continue
			}
			if err := loadDeliveryStates(tx, &c.ev); err != nil {
				return err
			}
			if !c.elsewhere && keep(&c.ev) {
				continue
			}
			n, err := deleteEvent(tx, &c.ev)
			if err != nil {
				return err
			}
			res.add(n)
		}
		return nil
	})
	if err != nil {
		return PruneResult{}, after, false, err
	}
	return res, next, more, nil
}

func loadDeliveryStates(tx *sql.Tx, ev *OldEvent) error {
	ev.Terminal, ev.Open = map[string]bool{}, map[string]bool{}
	rows, err := tx.Query(`SELECT route, state FROM deliveries WHERE event_seq = ?`, ev.Seq)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var route, state string
		if err := rows.Scan(&route, &state); err != nil {
			return err
		}
		if terminal(state) {
			ev.Terminal[route] = true
		} else {
			ev.Open[route] = true
		}
	}
	return rows.Err()
}

func deleteEvent(tx *sql.Tx, ev *OldEvent) (PruneResult, error) {
	var res PruneResult
	exec := func(n *int, q string, args ...any) error {
		r, err := tx.Exec(q, args...)
		if err != nil {
			return err
		}
		if n != nil {
			k, err := r.RowsAffected()
			*n += int(k)
			return err
		}
		return nil
	}
	err := errors.Join(
		exec(&res.Attempts, `DELETE FROM attempts WHERE delivery_id IN
			(SELECT id FROM deliveries WHERE event_seq = ?)`, ev.Seq),
		exec(&res.Deliveries, `DELETE FROM deliveries WHERE event_seq = ?`, ev.Seq),
		exec(&res.Events, `DELETE FROM events WHERE seq = ?`, ev.Seq),
		exec(nil, `DELETE FROM published WHERE seq = ?`, ev.Seq), // never in the outbox: see PruneEvents
		exec(nil, `DELETE FROM parked WHERE seq = ?`, ev.Seq),
		exec(nil, `DELETE FROM claimed_elsewhere WHERE seq = ?`, ev.Seq),
		exec(nil, `DELETE FROM replica_events WHERE seq = ?`, ev.Seq),
	)
	if err == nil && ev.Source == TaskSource {
		err = exec(nil, `DELETE FROM tasks WHERE id = ?`, ev.ID)
	}
	return res, err
}

// AttemptCursor is a position in the attempts table's key order:
// deliveries in creation order, each one's attempts in order.
type AttemptCursor struct {
	DeliveryID int64
	Attempt    int
}

// PruneAttempts deletes, in one write, the attempts started before before
// among the limit attempt records after the cursor. next is where the
// following call continues; more is false once the table ended, or the
// records looked at held none old enough and belong to a delivery created
// since before (an attempt is never much older than its delivery: the
// record is created by the first round).
func (s *Store) PruneAttempts(ctx context.Context, before time.Time, after AttemptCursor, limit int) (n int, next AttemptCursor, more bool, err error) {
	if limit <= 0 {
		limit = 500
	}
	err = s.write(ctx, func(tx *sql.Tx) error {
		n, next, more = 0, after, false
		rows, err := tx.Query(`SELECT delivery_id, attempt FROM attempts
			WHERE (delivery_id, attempt) > (?, ?) ORDER BY delivery_id, attempt LIMIT ?`,
			after.DeliveryID, after.Attempt, limit)
		if err != nil {
			return err
		}
		seen := 0
		for rows.Next() {
			if err := rows.Scan(&next.DeliveryID, &next.Attempt); err != nil {
				rows.Close()
				return err
			}
			seen++
		}
		if err := rows.Err(); err != nil { // not the table's end
			rows.Close()
			return err
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if seen == 0 {
			return nil
		}
		r, err := tx.Exec(`DELETE FROM attempts WHERE (delivery_id, attempt) > (?, ?)
			AND (delivery_id, attempt) <= (?, ?) AND started_at < ?`,
			after.DeliveryID, after.Attempt, next.DeliveryID, next.Attempt, before.UnixMilli())
		if err != nil {
			return err
		}
		k, err := r.RowsAffected()
		if err != nil {
			return err
		}
		n = int(k)
		if seen < limit {
			return nil
		}
		if k > 0 {
			more = true
			return nil
		}
		var created sql.NullInt64
		err = tx.QueryRow(`SELECT created_at FROM deliveries WHERE id = ?`, next.DeliveryID).Scan(&created)
		if errors.Is(err, sql.ErrNoRows) {
			err = nil
		}
		more = created.Valid && created.Int64 < before.UnixMilli()
		return err
	})
	if err != nil {
		return 0, after, false, err
	}
	return n, next, more, nil
}

// PrunerConfig configures a Pruner. Zero durations disable that pruning.
type PrunerConfig struct {
	// Events is how long events are kept (retention.events).
	Events time.Duration
	// Attempts is how long attempt records are kept (retention.attempts).
	Attempts time.Duration
	// Interval between passes. Default 1m.
	Interval time.Duration
	// Batch is the most rows one write looks at. Default 500.
	Batch int
	// Pause between two writes of a pass, so intake always gets the writer
	// in between. Default 10ms.
	Pause time.Duration
	// Keep says whether a past-retention event stays (see PruneEvents).
	// Default KeepOpen.
	Keep func(ev *OldEvent) bool
	// OnPruned, if set, is called after every write that deleted something.
	OnPruned func(PruneResult)
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Pruner deletes records past their retention in the background, a small
// batch per write.
type Pruner struct {
	s    *Store
	cfg  PrunerConfig
	log  *slog.Logger
	loop startstop.Loop
}

// NewPruner returns a pruner of s; Start runs it.
func NewPruner(s *Store, cfg PrunerConfig, log *slog.Logger) *Pruner {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Minute
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 500
	}
	if cfg.Pause <= 0 {
		cfg.Pause = 10 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Pruner{s: s, cfg: cfg, log: log}
}

// Start runs a pass now and then every Interval until Stop. Starting a
// started pruner does nothing.
func (p *Pruner) Start(ctx context.Context) error {
	p.loop.Start(ctx, p.run)
	return nil
}

// Stop ends the current pass after its write in flight and waits for it.
// Safe to call twice, and without Start.
func (p *Pruner) Stop(context.Context) error {
	p.loop.Stop()
	return nil
}

func (p *Pruner) run(ctx context.Context) {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		res, err := p.RunOnce(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			p.log.Warn("retention pass failed; next pass will continue", "err", err)
		case res != (PruneResult{}):
			p.log.Info("retention pass", "events", res.Events, "deliveries", res.Deliveries, "attempts", res.Attempts)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// RunOnce runs one whole pass: events, attempts, then expired task
// Idempotency-Keys, a batch per write.
func (p *Pruner) RunOnce(ctx context.Context) (PruneResult, error) {
	var total PruneResult
	now := p.cfg.Now()
	pause := func() bool {
		t := time.NewTimer(p.cfg.Pause)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	record := func(r PruneResult) {
		total.add(r)
		if p.cfg.OnPruned != nil && r != (PruneResult{}) {
			p.cfg.OnPruned(r)
		}
	}
	if p.cfg.Events > 0 {
		var cur EventCursor
		for {
			res, next, more, err := p.s.PruneEvents(ctx, now.Add(-p.cfg.Events), cur, p.cfg.Batch, p.cfg.Keep)
			if err != nil {
				return total, err
			}
			record(res)
			cur = next
			if !more || !pause() {
				break
			}
		}
	}
	if p.cfg.Attempts > 0 && ctx.Err() == nil {
		var cur AttemptCursor
		for {
			n, next, more, err := p.s.PruneAttempts(ctx, now.Add(-p.cfg.Attempts), cur, p.cfg.Batch)
			if err != nil {
				return total, err
			}
			record(PruneResult{Attempts: n})
			cur = next
			if !more || !pause() {
				break
			}
		}
	}
	// Expired task Idempotency-Keys.
	for ctx.Err() == nil {
		n, err := p.s.PruneKeys(ctx, now, p.cfg.Batch)
		if err != nil {
			return total, err
		}
		record(PruneResult{Keys: n})
		if n < p.cfg.Batch || !pause() {
			break
		}
	}
	return total, ctx.Err()
}
