package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// lookupConns is how many connections the delivery lookup keeps: a lookup
// is one indexed row, a few microseconds of SQLite.
const lookupConns = 2

const statusQuery = `SELECT id, state, attempts, rounds, next_attempt_at
	FROM deliveries WHERE source = ? AND event_id = ? AND route = ?`

// lookups runs the delivery engine's read before each round on read-only
// driver connections of its own, each with the statement prepared once.
// Through database/sql the same query cost twice the CPU (its pool, its
// argument conversion and row wrapping: BenchmarkDeliveryLookup).
type lookups struct {
	free   chan *lookupConn
	closed chan struct{}
	once   sync.Once
	all    []*lookupConn // every connection opened
	ready  int           // how many of them went into free
}

type lookupConn struct {
	conn driver.Conn
	stmt driver.StmtQueryContext
	args []driver.NamedValue
	dest []driver.Value
}

func openLookups(d driver.Driver, dsn string) (*lookups, error) {
	l := &lookups{free: make(chan *lookupConn, lookupConns), closed: make(chan struct{})}
	for range lookupConns {
		c, err := d.Open(dsn)
		if err != nil {
			l.close()
			return nil, fmt.Errorf("open: %w", err)
		}
		lc := &lookupConn{conn: c, args: make([]driver.NamedValue, 3), dest: make([]driver.Value, 5)}
		l.all = append(l.all, lc)
		st, err := c.Prepare(statusQuery)
		if err != nil {
			l.close()
			return nil, fmt.Errorf("prepare: %w", err)
		}
		sq, ok := st.(driver.StmtQueryContext)
		if !ok {
			st.Close()
			l.close()
			return nil, errors.New("driver statement cannot query with a context")
		}
		lc.stmt = sq
		for i := range lc.args {
			lc.args[i].Ordinal = i + 1
		}
		l.free <- lc
		l.ready++
	}
	return l, nil
}

// status reads one delivery; found is false if there is none.
func (l *lookups) status(route, source, eventID string) (d DeliveryStatus, found bool, err error) {
	var lc *lookupConn
	select {
	case lc = <-l.free:
	case <-l.closed:
		return d, false, ErrClosed
	}
	defer func() { l.free <- lc }()
	lc.args[0].Value, lc.args[1].Value, lc.args[2].Value = source, eventID, route
	// One indexed row: not worth making cancellable (a context hook in the
	// driver per call).
	rows, err := lc.stmt.QueryContext(context.Background(), lc.args)
	if err != nil {
		return d, false, err
	}
	err = rows.Next(lc.dest)
	if cerr := rows.Close(); err == nil || errors.Is(err, io.EOF) && cerr != nil {
		err = cerr
	}
	switch {
	case errors.Is(err, io.EOF):
		return d, false, nil
	case err != nil:
		return d, false, err
	}
	id, ok1 := lc.dest[0].(int64)
	attempts, ok2 := lc.dest[2].(int64)
	rounds, ok3 := lc.dest[3].(int64)
	if !ok1 || !ok2 || !ok3 {
		return d, false, fmt.Errorf("unexpected column types %T %T %T", lc.dest[0], lc.dest[2], lc.dest[3])
	}
	switch st := lc.dest[1].(type) {
	case string:
		d.State = st
	case []byte:
		d.State = string(st)
	default:
		return d, false, fmt.Errorf("unexpected state column type %T", st)
	}
	d.ID, d.Attempts, d.Rounds = id, int(attempts), int(rounds)
	if next, ok := lc.dest[4].(int64); ok {
		d.NextAttemptAt = time.UnixMilli(next)
	}
	return d, true, nil
}

// close closes the connections once those in use are back. Later lookups
// return ErrClosed.
func (l *lookups) close() error {
	var err error
	l.once.Do(func() {
		close(l.closed)
		for range l.ready { // wait for those in use
			<-l.free
		}
		for _, lc := range l.all {
			if lc.stmt != nil {
				err = errors.Join(err, lc.stmt.(driver.Stmt).Close())
			}
			err = errors.Join(err, lc.conn.Close())
		}
	})
	return err
}
