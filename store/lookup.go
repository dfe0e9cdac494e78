package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"time"
)

// The delivery engine's read before each round (DeliveryStatus) runs on
// the writer's connection, between two commits. In WAL mode a connection
// drops its whole page cache whenever another connection committed, so on
// a read-only connection of its own the lookup read its B-tree path again
// from the WAL or the database file after nearly every commit: about 50 µs
// of gateway CPU per delivery in the bench's drain. The writer's cache
// survives its own commits, so there the lookup is a few page-cache hits.
//
// The writer answers the lookups it finds in a batch before it begins the
// batch's transaction: they see every committed write and nothing
// uncommitted, and they do not wait for the batch's fsync.

// statusQuery reads the event of a seq, whether it is the event the
// message names (source, event_id), and its delivery to a route if any.
const statusQuery = `SELECT e.source = ? AND e.event_id = ?, d.id, d.state, d.attempts, d.rounds, d.next_attempt_at
	FROM events e LEFT JOIN deliveries d ON d.event_seq = e.seq AND d.route = ?
	WHERE e.seq = ?`

// statusLookup is one DeliveryStatus question and its answer.
type statusLookup struct {
	route, source, eventID string
	seq                    int64
	status                 DeliveryStatus
	found, other           bool // other: seq is not that event's here
}

// writerLookup is statusQuery prepared on the writer's driver connection;
// only the writer goroutine uses it.
type writerLookup struct {
	conn driver.Conn // the connection stmt was prepared on
	stmt driver.StmtQueryContext
	args []driver.NamedValue
	dest []driver.Value
}

// answerLookups settles the lookups among batch and returns its writes, in
// order, in batch's own array.
func (s *Store) answerLookups(batch []*op) []*op {
	writes := batch[:0]
	looks := s.looks[:0]
	for _, o := range batch {
		if o.lookup {
			looks = append(looks, o)
		} else {
			writes = append(writes, o)
		}
	}
	if len(looks) == 0 {
		return writes
	}
	err := s.runLookups(looks)
	for i, o := range looks {
		if err != nil && o.err == nil {
			o.err = err
		}
		looks[i] = nil // o is the caller's again once done is sent
		o.done <- struct{}{}
	}
	s.looks = looks[:0]
	return writes
}

// runLookups answers looks on the writer's connection. An error of one
// lookup stays in its op; a returned error applies to all of them.
func (s *Store) runLookups(looks []*op) error {
	ctx := context.Background()
	conn, err := s.w.Conn(ctx)
	if err != nil {
		return fmt.Errorf("%w: delivery status: %w", ErrUnavailable, err)
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		c, ok := dc.(driver.Conn)
		if !ok {
			return fmt.Errorf("%w: delivery status: driver connection is a %T", ErrUnavailable, dc)
		}
		// Between batches the writer's connection is outside any
		// transaction; if a failed ROLLBACK ever left one open, lookups
		// would see its uncommitted writes.
		if ac, ok := dc.(interface{ AutoCommit() bool }); ok && !ac.AutoCommit() {
			return fmt.Errorf("%w: delivery status: the writer's connection is inside a transaction", ErrUnavailable)
		}
		if s.wl.conn != c { // first use, or database/sql replaced a broken connection
			s.wl.close()
			if err := s.wl.prepare(c); err != nil {
				return fmt.Errorf("%w: delivery status: %w", ErrUnavailable, err)
			}
		}
		for _, o := range looks {
			l := &o.look
			l.status, l.found, l.other, o.err = s.wl.status(l.route, l.seq, l.source, l.eventID)
			if o.err != nil {
				o.err = fmt.Errorf("%w: delivery status: %w", ErrUnavailable, o.err)
			}
		}
		return nil
	})
}

func (wl *writerLookup) prepare(c driver.Conn) error {
	st, err := c.Prepare(statusQuery)
	if err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	sq, ok := st.(driver.StmtQueryContext)
	if !ok {
		st.Close()
		return errors.New("driver statement cannot query with a context")
	}
	*wl = writerLookup{conn: c, stmt: sq, args: make([]driver.NamedValue, 4), dest: make([]driver.Value, 6)}
	for i := range wl.args {
		wl.args[i].Ordinal = i + 1
	}
	return nil
}

// close closes the statement, if prepared; the writer calls it before the
// connection closes.
func (wl *writerLookup) close() {
	if wl.stmt != nil {
		wl.stmt.(driver.Stmt).Close()
	}
	*wl = writerLookup{}
}

// status reads one delivery; found is false if there is none, other is
// true if seq is not the event of source and eventID in this store.
func (wl *writerLookup) status(route string, seq int64, source, eventID string) (d DeliveryStatus, found, other bool, err error) {
	wl.args[0].Value, wl.args[1].Value, wl.args[2].Value, wl.args[3].Value = source, eventID, route, seq
	// One indexed row: not worth making cancellable (a context hook in the
	// driver per call).
	rows, err := wl.stmt.QueryContext(context.Background(), wl.args)
	if err != nil {
		return d, false, false, err
	}
	err = rows.Next(wl.dest)
	if cerr := rows.Close(); err == nil || errors.Is(err, io.EOF) && cerr != nil {
		err = cerr
	}
	switch {
	case errors.Is(err, io.EOF): // no event of that seq
		return d, false, true, nil
	case err != nil:
		return d, false, false, err
	}
	if mine, ok := wl.dest[0].(int64); !ok || mine != 1 {
		return d, false, true, nil
	}
	if wl.dest[1] == nil { // no delivery
		return d, false, false, nil
	}
	id, ok1 := wl.dest[1].(int64)
	attempts, ok2 := wl.dest[3].(int64)
	rounds, ok3 := wl.dest[4].(int64)
	if !ok1 || !ok2 || !ok3 {
		return d, false, false, fmt.Errorf("unexpected column types %T %T %T", wl.dest[1], wl.dest[3], wl.dest[4])
	}
	switch st := wl.dest[2].(type) {
	case string:
		d.State = st
	case []byte:
		d.State = string(st)
	default:
		return d, false, false, fmt.Errorf("unexpected state column type %T", st)
	}
	d.ID, d.Attempts, d.Rounds = id, int(attempts), int(rounds)
	if next, ok := wl.dest[5].(int64); ok {
		d.NextAttemptAt = time.UnixMilli(next)
	}
	return d, true, false, nil
}
