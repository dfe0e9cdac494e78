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
// drops its whole page cache whenever another connection commits, so a
// read-only connection would read the lookup's B-tree path again after
// nearly every commit; the writer's cache survives its own commits.
//
// The writer answers the lookups it finds in a batch before it begins the
// batch's transaction: they see every committed write and nothing
// uncommitted, and they do not wait for the batch's fsync.

// The lookup is two single-table statements, not a join: SQLite compiles
// a statement again at its next step when a parameter its plan looked at
// is bound anew (a join's planner looks at them), and go-sqlite3 clears
// every binding before each run, so a join would be compiled again at
// every lookup. Each statement finds its one row by a whole key (the
// rowid; UNIQUE (event_seq, route)), which SQLite plans without looking at
// the values: keep it so (TestDeliveryStatusCompiledOnce).

// eventQuery reads whether seq is the event the message names.
const eventQuery = `SELECT source = ? AND event_id = ? FROM events WHERE seq = ?`

// deliveryQuery reads the event's delivery to a route, if any.
const deliveryQuery = `SELECT id, state, attempts, rounds, next_attempt_at FROM deliveries
	WHERE event_seq = ? AND route = ?`

// statusLookup is one DeliveryStatus question and its answer.
type statusLookup struct {
	route, source, eventID string
	seq                    int64
	status                 DeliveryStatus
	found, other           bool // other: seq is not that event's here
}

// writerLookup is the lookup's statements prepared on the writer's driver
// connection; only the writer goroutine uses it.
type writerLookup struct {
	conn         driver.Conn // the connection the statements were prepared on
	event, deliv driver.StmtQueryContext
	eargs, dargs []driver.NamedValue
	edest, ddest []driver.Value
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
	event, err := prepareQuery(c, eventQuery)
	if err != nil {
		return err
	}
	deliv, err := prepareQuery(c, deliveryQuery)
	if err != nil {
		event.(driver.Stmt).Close()
		return err
	}
	*wl = writerLookup{conn: c, event: event, deliv: deliv,
		eargs: namedArgs(3), dargs: namedArgs(2), edest: make([]driver.Value, 1), ddest: make([]driver.Value, 5)}
	return nil
}

func prepareQuery(c driver.Conn, query string) (driver.StmtQueryContext, error) {
	st, err := c.Prepare(query)
	if err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	sq, ok := st.(driver.StmtQueryContext)
	if !ok {
		st.Close()
		return nil, errors.New("driver statement cannot query with a context")
	}
	return sq, nil
}

func namedArgs(n int) []driver.NamedValue {
	args := make([]driver.NamedValue, n)
	for i := range args {
		args[i].Ordinal = i + 1
	}
	return args
}

// close closes the statements, if prepared; the writer calls it before the
// connection closes.
func (wl *writerLookup) close() {
	for _, st := range []driver.StmtQueryContext{wl.event, wl.deliv} {
		if st != nil {
			st.(driver.Stmt).Close()
		}
	}
	*wl = writerLookup{}
}

// queryRow runs st and reads its first row into dest; io.EOF if it has none.
// One indexed row: not worth making cancellable (a context hook in the
// driver per call).
func queryRow(st driver.StmtQueryContext, args []driver.NamedValue, dest []driver.Value) error {
	rows, err := st.QueryContext(context.Background(), args)
	if err != nil {
		return err
	}
	err = rows.Next(dest)
	if cerr := rows.Close(); err == nil || errors.Is(err, io.EOF) && cerr != nil {
		err = cerr
	}
	return err
}

// status reads one delivery; found is false if there is none, other is
// true if seq is not the event of source and eventID in this store.
func (wl *writerLookup) status(route string, seq int64, source, eventID string) (d DeliveryStatus, found, other bool, err error) {
	wl.eargs[0].Value, wl.eargs[1].Value, wl.eargs[2].Value = source, eventID, seq
	switch err := queryRow(wl.event, wl.eargs, wl.edest); {
	case errors.Is(err, io.EOF): // no event of that seq
		return d, false, true, nil
	case err != nil:
		return d, false, false, err
	}
	if mine, ok := wl.edest[0].(int64); !ok || mine != 1 {
		return d, false, true, nil
	}
	wl.dargs[0].Value, wl.dargs[1].Value = seq, route
	switch err := queryRow(wl.deliv, wl.dargs, wl.ddest); {
	case errors.Is(err, io.EOF): // no delivery
		return d, false, false, nil
	case err != nil:
		return d, false, false, err
	}
	id, ok1 := wl.ddest[0].(int64)
	attempts, ok2 := wl.ddest[2].(int64)
	rounds, ok3 := wl.ddest[3].(int64)
	if !ok1 || !ok2 || !ok3 {
		return d, false, false, fmt.Errorf("unexpected column types %T %T %T", wl.ddest[0], wl.ddest[2], wl.ddest[3])
	}
	switch st := wl.ddest[1].(type) {
	case string:
		d.State = st
	case []byte:
		d.State = string(st)
	default:
		return d, false, false, fmt.Errorf("unexpected state column type %T", st)
	}
	d.ID, d.Attempts, d.Rounds = id, int(attempts), int(rounds)
	if next, ok := wl.ddest[4].(int64); ok {
		d.NextAttemptAt = time.UnixMilli(next)
	}
	return d, true, false, nil
}
