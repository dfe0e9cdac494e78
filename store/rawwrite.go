package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
)

// The writer runs the hot writes (claims, delivery rounds, marking events
// published) on its driver connection, with statements prepared there,
// not through database/sql: each Exec there boxes its arguments, converts
// them into a slice of its own and wraps the result, and a transaction
// starts a goroutine and a context. A batch of only hot writes also runs
// its BEGIN IMMEDIATE and COMMIT as prepared statements; a batch with a
// generic write (a closure given a *sql.Tx) runs in a database/sql
// transaction, its hot writes on the same connection in between.

// rawWriter is the writer's statements prepared on its driver connection;
// only the writer goroutine uses it.
type rawWriter struct {
	conn                             driver.Conn // the connection they were prepared on
	begin, commit, rollback          driver.StmtExecContext
	claim, enqueue, unqueue, publish driver.StmtExecContext
	insert, attempt                  driver.StmtExecContext
	upsert                           driver.StmtQueryContext
	args                             []driver.NamedValue
	dest                             []driver.Value
}

// Statements of the hot writes (a task's claim runs claimSQL and
// enqueueSQL too, through stmts).
const (
	claimSQL = `INSERT INTO events (source, event_id, event_type, content_type, headers, body, received_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (source, event_id) DO NOTHING`
	enqueueSQL = `INSERT INTO outbox (seq) VALUES (?)`
	unqueueSQL = `DELETE FROM outbox WHERE seq = ?`
	// The conflict cannot happen while every event is in exactly one of
	// outbox and published; if it did, the new ack wins rather than
	// failing the relay's every retry.
	publishSQL = `INSERT INTO published (seq, stream_seq, published_at) VALUES (?, ?, ?)
		ON CONFLICT (seq) DO UPDATE SET stream_seq = excluded.stream_seq, published_at = excluded.published_at`
	deliveryInsertSQL = `INSERT INTO deliveries (event_seq, route, source, event_id, event_type, idempotency_key, state,
			attempts, rounds, last_status, last_error, next_attempt_at, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (event_seq, route) DO NOTHING`
	deliveryUpsertSQL = `INSERT INTO deliveries (event_seq, route, source, event_id, event_type, idempotency_key, state,
			attempts, rounds, last_status, last_error, next_attempt_at, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (event_seq, route) DO UPDATE SET
			state = CASE WHEN deliveries.state = 'succeeded' THEN 'succeeded' ELSE excluded.state END,
			attempts = deliveries.attempts + excluded.attempts,
			rounds = max(deliveries.rounds, excluded.rounds),
			last_status = CASE WHEN excluded.attempts > 0 THEN excluded.last_status ELSE deliveries.last_status END,
			last_error = CASE WHEN excluded.attempts > 0 THEN excluded.last_error ELSE deliveries.last_error END,
			next_attempt_at = excluded.next_attempt_at,
			updated_at = excluded.updated_at
		RETURNING id, attempts`
	attemptSQL = `INSERT INTO attempts (delivery_id, attempt, started_at, duration_ms,
		status, error, response) VALUES (?, ?, ?, ?, ?, ?, ?)`
)

// hot reports whether o runs on the driver connection.
func (o *op) hot() bool { return o.claim != nil || o.round != nil || o.published != nil }

// on makes sure rw's statements are prepared on c.
func (rw *rawWriter) on(c driver.Conn) error {
	if rw.conn == c {
		return nil
	}
	rw.close() // first use, or database/sql replaced a broken connection
	var n rawWriter
	var err error
	ex := func(query string) driver.StmtExecContext {
		if err != nil {
			return nil
		}
		var st driver.Stmt
		if st, err = c.Prepare(query); err != nil {
			err = fmt.Errorf("prepare: %w", err)
			return nil
		}
		sx, ok := st.(driver.StmtExecContext)
		if !ok {
			st.Close()
			err = errors.New("driver statement cannot run with a context")
			return nil
		}
		return sx
	}
	// BEGIN IMMEDIATE, as the connection's _txlock: the write lock is
	// taken at once, so the batch never fails half-way for want of it.
	n.begin, n.commit, n.rollback = ex("BEGIN IMMEDIATE"), ex("COMMIT"), ex("ROLLBACK")
	n.claim, n.enqueue, n.unqueue, n.publish = ex(claimSQL), ex(enqueueSQL), ex(unqueueSQL), ex(publishSQL)
	n.insert, n.attempt = ex(deliveryInsertSQL), ex(attemptSQL)
	if err == nil {
		n.upsert, err = prepareQuery(c, deliveryUpsertSQL)
	}
	n.conn = c
	*rw = n
	if err != nil {
		rw.close()
		return err
	}
	rw.args, rw.dest = namedArgs(14), make([]driver.Value, 2)
	return nil
}

// close closes the statements prepared; the writer calls it before the
// connection closes.
func (rw *rawWriter) close() {
	for _, st := range []any{rw.begin, rw.commit, rw.rollback, rw.claim, rw.enqueue, rw.unqueue, rw.publish,
		rw.insert, rw.attempt, rw.upsert} {
		if st, ok := st.(driver.Stmt); ok && st != nil {
			st.Close()
		}
	}
	*rw = rawWriter{}
}

// exec runs st with the first n of rw.args.
func (rw *rawWriter) exec(st driver.StmtExecContext, n int) (driver.Result, error) {
	return st.ExecContext(context.Background(), rw.args[:n])
}

// set sets rw.args to vs.
func (rw *rawWriter) set(vs ...driver.Value) int {
	for i, v := range vs {
		rw.args[i].Value = v
	}
	return len(vs)
}

// run runs the hot op o, and says the step that failed. The arguments
// are cleared after, so that the batch's values are not kept alive.
func (rw *rawWriter) run(o *op) (step string, err error) {
	defer func() {
		for i := range rw.args {
			rw.args[i].Value = nil
		}
		clear(rw.dest)
	}()
	switch {
	case o.claim != nil:
		o.dup, err = rw.claimEvent(o.claim)
		return "claim", err
	case o.round != nil:
		return "delivery round", rw.record(o.round, o.attempts, o.now)
	case o.published != nil:
		return "mark published", rw.markPublished(o.published, o.now)
	}
	return "", nil
}

// abort rolls back the transaction after err. As database/sql would, it
// rolls back after a failed COMMIT too (SQLite may leave the transaction
// open then); should the connection still be inside one after that, it is
// given up (driver.ErrBadConn), so that the next batch gets a new one.
func (rw *rawWriter) abort(c driver.Conn, err error) error {
	_, rerr := rw.rollback.ExecContext(context.Background(), nil)
	if ac, ok := c.(interface{ AutoCommit() bool }); rerr != nil && (!ok || !ac.AutoCommit()) {
		return errors.Join(err, fmt.Errorf("rollback: %w", rerr), driver.ErrBadConn)
	}
	return err
}

// claimEvent stores ev and puts it in the outbox, unless an event of its
// source and ID is stored (dup).
func (rw *rawWriter) claimEvent(ev *Event) (dup bool, err error) {
	seq, ok, err := rawInserted(rw.exec(rw.claim, rw.set(ev.Source, ev.ID, ev.Type, ev.ContentType,
		ev.Headers, ev.Body, ev.ReceivedAt.UnixMilli())))
	if !ok || err != nil {
		return !ok, err
	}
	if _, err := rw.exec(rw.enqueue, rw.set(seq)); err != nil {
		return false, fmt.Errorf("outbox: %w", err)
	}
	ev.Seq = seq
	return false, nil
}

// record writes one round (see RecordRound), now in unix ms.
func (rw *rawWriter) record(d *Delivery, attempts []Attempt, now int64) error {
	var next driver.Value
	if !d.NextAttemptAt.IsZero() {
		next = d.NextAttemptAt.UnixMilli()
	}
	n := rw.set(d.EventSeq, d.Route, d.Source, d.EventID, d.EventType, d.IdempotencyKey, d.State,
		int64(len(attempts)), int64(d.Rounds), int64(d.LastStatus), d.LastError, next, now, now)
	id, ok, err := rawInserted(rw.exec(rw.insert, n))
	if err != nil {
		return fmt.Errorf("insert delivery: %w", err)
	}
	total := int64(len(attempts))
	if !ok { // a later round
		err := queryRow(rw.upsert, rw.args[:n], rw.dest)
		var ok1, ok2 bool
		id, ok1 = rw.dest[0].(int64)
		total, ok2 = rw.dest[1].(int64)
		if errors.Is(err, io.EOF) {
			err = errors.New("no row returned")
		}
		if err == nil && (!ok1 || !ok2) {
			err = fmt.Errorf("unexpected column types %T %T", rw.dest[0], rw.dest[1])
		}
		if err != nil {
			return fmt.Errorf("upsert delivery: %w", err)
		}
	}
	// Attempt numbers continue from the stored count, which only this
	// writer changes: they are unique per delivery.
	first := total - int64(len(attempts))
	for i := range attempts {
		a := &attempts[i]
		if _, err := rw.exec(rw.attempt, rw.set(id, first+int64(i)+1, a.StartedAt.UnixMilli(), a.Duration.Milliseconds(),
			int64(a.Status), a.Error, a.Response)); err != nil {
			return fmt.Errorf("insert attempt: %w", err)
		}
	}
	d.ID, d.Attempts = id, int(total)
	return nil
}

// markPublished takes acknowledged events out of the outbox and records
// their stream sequences (see MarkPublished), at in unix ms.
func (rw *rawWriter) markPublished(acks []Published, at int64) error {
	for _, a := range acks {
		r, err := rw.exec(rw.unqueue, rw.set(a.Seq))
		if err != nil {
			return err
		}
		if n, err := r.RowsAffected(); err != nil || n == 0 {
			if err != nil {
				return err
			}
			continue // not in the outbox
		}
		if _, err := rw.exec(rw.publish, rw.set(a.Seq, a.StreamSeq, at)); err != nil {
			return err
		}
	}
	return nil
}

// rawInserted is inserted for a driver's result.
func rawInserted(r driver.Result, err error) (rowid int64, ok bool, _ error) {
	if err != nil {
		return 0, false, err
	}
	n, err := r.RowsAffected()
	if n == 0 || err != nil {
		return 0, false, err
	}
	rowid, err = r.LastInsertId()
	return rowid, err == nil, err
}
