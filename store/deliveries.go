package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// Delivery states.
const (
	StatePending   = "pending"   // queued for its first round, or a manual retry
	StateRetrying  = "retrying"  // a round failed; the next one is scheduled
	StateSucceeded = "succeeded" // a 2xx was received
	StateDead      = "dead"      // 410 Gone, or the schedule is exhausted
	StateFiltered  = "filtered"  // the route's filter rejected the event: never sent
)

// terminal reports whether a delivery in state runs no further round on
// its own.
func terminal(state string) bool {
	return state == StateSucceeded || state == StateDead || state == StateFiltered
}

// Delivery is one (route, event) pair and where its delivery stands.
type Delivery struct {
	// UID is the delivery's ID in the API, the same on every gateway
	// (DeliveryUID), computed when the row is read: it is not stored. ID is
	// this store's row, which attempts refer to.
	UID            string    `json:"id"`
	ID             int64     `json:"-"`
	EventSeq       int64     `json:"event_seq"` // the event's intake sequence
	Route          string    `json:"route"`
	Source         string    `json:"source"`
	EventID        string    `json:"event_id"`
	EventType      string    `json:"event_type"`
	IdempotencyKey string    `json:"idempotency_key"`
	State          string    `json:"state"`
	Attempts       int       `json:"attempts"`
	Rounds         int       `json:"rounds"`
	LastStatus     int       `json:"last_status"`
	LastError      string    `json:"last_error,omitempty"`
	NextAttemptAt  time.Time `json:"next_attempt_at,omitzero"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// Attempt is one HTTP request of a delivery.
type Attempt struct {
	Attempt   int           `json:"attempt"`
	StartedAt time.Time     `json:"started_at"`
	Duration  time.Duration `json:"-"`
	Status    int           `json:"status"`
	Error     string        `json:"error,omitempty"`
	Response  []byte        `json:"-"`
}

// ErrOtherEvent is DeliveryStatus's answer for a message whose seq is
// not its event's in this store.
var ErrOtherEvent = errors.New("the sequence is not that event's in this store")

// errNoEventSeq refuses a delivery write that does not say its event.
var errNoEventSeq = errors.New("delivery without an event sequence")

// Terminal reports whether no further round will run on its own.
func (d *Delivery) Terminal() bool { return terminal(d.State) }

const deliveryColumns = `id, event_seq, route, source, event_id, event_type, idempotency_key, state, attempts,
	rounds, last_status, last_error, next_attempt_at, created_at, updated_at`

func scanDelivery(row interface{ Scan(...any) error }) (*Delivery, error) {
	var d Delivery
	var next sql.NullInt64
	var created, updated int64
	err := row.Scan(&d.ID, &d.EventSeq, &d.Route, &d.Source, &d.EventID, &d.EventType, &d.IdempotencyKey, &d.State,
		&d.Attempts, &d.Rounds, &d.LastStatus, &d.LastError, &next, &created, &updated)
	if err != nil {
		return nil, err
	}
	if next.Valid {
		d.NextAttemptAt = time.UnixMilli(next.Int64)
	}
	d.CreatedAt, d.UpdatedAt = time.UnixMilli(created), time.UnixMilli(updated)
	d.UID = DeliveryUID(d.Route, d.Source, d.EventID)
	return &d, nil
}

func (s *Store) queryDelivery(ctx context.Context, where string, args ...any) (*Delivery, error) {
	d, err := scanDelivery(s.r.QueryRowContext(ctx, `SELECT `+deliveryColumns+` FROM deliveries WHERE `+where, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("%w: delivery: %w", ErrUnavailable, err)
	}
	return d, nil
}

// Delivery returns the delivery of an event to a route, or ErrNotFound.
func (s *Store) Delivery(ctx context.Context, route, source, eventID string) (*Delivery, error) {
	return s.queryDelivery(ctx, `event_seq = (SELECT seq FROM events WHERE source = ? AND event_id = ?) AND route = ?`,
		source, eventID, route)
}

// DeliveryByID returns the delivery stored in row id, or ErrNotFound.
func (s *Store) DeliveryByID(ctx context.Context, id int64) (*Delivery, error) {
	return s.queryDelivery(ctx, `id = ?`, id)
}

// DeliveryByUID returns the delivery whose API ID is uid, or ErrNotFound
// (also for a uid that is no delivery ID). It is found by its event and
// route: a replicated delivery whose event row is not here yet (kept under
// a negative event_seq) is not found until the event arrives.
func (s *Store) DeliveryByUID(ctx context.Context, uid string) (*Delivery, error) {
	route, source, eventID, ok := ParseDeliveryID(uid)
	if !ok {
		return nil, ErrNotFound
	}
	return s.Delivery(ctx, route, source, eventID)
}

// RecordRound stores the outcome of one delivery round in one transaction:
// it creates or updates the delivery of event d.EventSeq to d.Route
// (d.Attempts is the number of attempts
// made in this round; they are added) and appends the attempts. A delivery
// that already succeeded stays succeeded. It sets d.ID and d.Attempts to the
// stored values.
func (s *Store) RecordRound(ctx context.Context, d *Delivery, attempts []Attempt) error {
	if d.EventSeq <= 0 {
		return fmt.Errorf("record delivery round: %w", errNoEventSeq)
	}
	// The writer runs the round (see commit); it is done with d and
	// attempts when submit returns.
	o := getOp()
	o.round, o.attempts, o.now = d, attempts, time.Now().UnixMilli()
	err := s.submit(ctx, o)
	putOp(o)
	if err != nil {
		return fmt.Errorf("record delivery round: %w", err)
	}
	return nil
}

// DeliveryStatus is what the delivery engine reads of a delivery before a
// round.
type DeliveryStatus struct {
	ID            int64
	State         string
	Attempts      int
	Rounds        int
	NextAttemptAt time.Time // zero unless retrying
}

// Terminal reports whether no further round will run on its own.
func (d *DeliveryStatus) Terminal() bool { return terminal(d.State) }

// DeliveryStatus returns where the delivery of event seq to a route
// stands, or ErrNotFound, or ErrOtherEvent if seq is not the event of
// source and eventID in this store (see AdoptEvent): the engine's lookup,
// answered from memory for an event just stored with no round to route
// yet (fresh.go), else by two prepared statements on the writer's
// connection (lookup.go) that read only the columns a round needs
// (Delivery reads the whole row). It sees every write committed before it
// was called.
func (s *Store) DeliveryStatus(ctx context.Context, route string, seq int64, source, eventID string) (DeliveryStatus, error) {
	if err := ctx.Err(); err != nil {
		return DeliveryStatus{}, err
	}
	if s.fresh.absent(route, seq, source, eventID) {
		return DeliveryStatus{}, ErrNotFound
	}
	return s.queryStatus(ctx, route, seq, source, eventID)
}

// queryStatus is DeliveryStatus asked of the writer.
func (s *Store) queryStatus(ctx context.Context, route string, seq int64, source, eventID string) (DeliveryStatus, error) {
	o := getOp()
	o.lookup, o.look = true, statusLookup{route: route, source: source, eventID: eventID, seq: seq}
	err := s.submit(ctx, o)
	d, found, other := o.look.status, o.look.found, o.look.other
	putOp(o)
	switch {
	case err == nil && other:
		return DeliveryStatus{}, ErrOtherEvent
	case errors.Is(err, ErrUnavailable):
		return DeliveryStatus{}, err
	case err != nil: // closed, or ctx ended while the queue was full
		return DeliveryStatus{}, fmt.Errorf("%w: delivery status: %w", ErrUnavailable, err)
	case !found:
		return DeliveryStatus{}, ErrNotFound
	}
	return d, nil
}

// SetDeliveryState changes a delivery's state (e.g. to pending for a manual
// retry, noting the reset: see PendingDeliveries), unless it already
// succeeded. It reports whether it changed.
func (s *Store) SetDeliveryState(ctx context.Context, id int64, state string) (bool, error) {
	return s.SetClusterDeliveryState(ctx, id, state, nil)
}

// SetClusterDeliveryState is SetDeliveryState in cluster mode: with rec
// (the change as the cluster's delivery state wrote it), in the same
// transaction, the delivery takes rec's version and rec is put in
// records_out for the other gateways' stores (see StateRecord).
func (s *Store) SetClusterDeliveryState(ctx context.Context, id int64, state string, rec *StateRecord) (bool, error) {
	var was bool
	err := s.write(ctx, func(tx *sql.Tx) (err error) {
		now := time.Now().UnixMilli()
		was, err = changed(tx.Exec(`UPDATE deliveries SET state = ?, updated_at = ?,
				reset_at = CASE WHEN ? = 'pending' THEN ? ELSE reset_at END
			WHERE id = ? AND state != 'succeeded'`,
			state, now, state, now, id))
		if err != nil || !was || rec == nil {
			return err
		}
		return stateOut(tx, id, rec, now)
	})
	return was, err
}

// DeliveryFilter selects deliveries for ListDeliveries.
type DeliveryFilter struct {
	Route, State, Source string
	EventID              string
	// Since and Until, when set, keep deliveries created at or after Since
	// and before Until.
	Since, Until time.Time
	After        *DeliveryCursor // only deliveries after this position
	Limit        int
}

// ListDeliveries returns deliveries matching f in (created_at, source,
// event_id, route) order, the same on every gateway. It walks an index on
// created_at (a state other than succeeded: deliveries_state, which holds
// no succeeded delivery), sorting only deliveries created in the same
// millisecond.
func (s *Store) ListDeliveries(ctx context.Context, f DeliveryFilter) ([]Delivery, error) {
	where, args := deliveryWhere(f)
	if f.Limit <= 0 {
		f.Limit = 100
	}
	args = append(args, f.Limit)
	//nolint:gosec // G202: where joins the constant conditions of deliveryWhere; every value is a bound argument
	rows, err := s.r.QueryContext(ctx, `SELECT `+deliveryColumns+` FROM deliveries WHERE `+
		where+` ORDER BY created_at, source, event_id, route LIMIT ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("%w: list deliveries: %w", ErrUnavailable, err)
	}
	defer rows.Close()
	var out []Delivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, fmt.Errorf("%w: list deliveries: %w", ErrUnavailable, err)
		}
		out = append(out, *d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%w: list deliveries: %w", ErrUnavailable, err)
	}
	return out, nil
}

// CountDeliveries returns how many deliveries match f (After and Limit
// aside).
func (s *Store) CountDeliveries(ctx context.Context, f DeliveryFilter) (int64, error) {
	f.After = nil
	where, args := deliveryWhere(f)
	var n int64
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM deliveries WHERE `+where, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("%w: count deliveries: %w", ErrUnavailable, err)
	}
	return n, nil
}

// deliveryWhere is the condition and its arguments of a DeliveryFilter.
func deliveryWhere(f DeliveryFilter) (string, []any) {
	var where []string
	var args []any
	add := func(cond string, v any) {
		where = append(where, cond)
		args = append(args, v)
	}
	// A range on created_at, always: the planner walks an index in list
	// order (LIMIT is a parameter it does not know) rather than sort all.
	if f.After != nil {
		add("created_at >= ?", f.After.CreatedAt)
		where = append(where, "(created_at > ? OR (source, event_id, route) > (?, ?, ?))")
		args = append(args, f.After.CreatedAt, f.After.Source, f.After.EventID, f.After.Route)
	} else {
		add("created_at >= ?", math.MinInt64)
	}
	if !f.Since.IsZero() {
		add("created_at >= ?", f.Since.UnixMilli())
	}
	if !f.Until.IsZero() {
		add("created_at < ?", f.Until.UnixMilli())
	}
	if f.Route != "" {
		add("route = ?", f.Route)
	}
	if f.State != "" {
		add("state = ?", f.State)
		if f.State != StateSucceeded {
			// Written out: the planner takes the partial index for it.
			where = append(where, "state != 'succeeded'")
		}
	}
	switch {
	case f.Source != "" && f.EventID != "": // one event: by its seq
		where = append(where, "event_seq = (SELECT seq FROM events WHERE source = ? AND event_id = ?)")
		args = append(args, f.Source, f.EventID)
	case f.Source != "":
		add("source = ?", f.Source)
	case f.EventID != "":
		add("event_id = ?", f.EventID)
	}
	return strings.Join(where, " AND "), args
}

// MaxAttemptsRead is the most attempts Attempts returns: a delivery's
// attempts grow with every round an operator or a task client asks for.
const MaxAttemptsRead = 100

// Attempts returns a delivery's latest attempts, at most MaxAttemptsRead,
// in order (the delivery's Attempts counts them all).
func (s *Store) Attempts(ctx context.Context, deliveryID int64) ([]Attempt, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT * FROM (SELECT attempt, started_at, duration_ms, status, error, response
		FROM attempts WHERE delivery_id = ? ORDER BY attempt DESC LIMIT ?) ORDER BY attempt`, deliveryID, MaxAttemptsRead)
	if err != nil {
		return nil, fmt.Errorf("%w: attempts: %w", ErrUnavailable, err)
	}
	defer rows.Close()
	var out []Attempt
	for rows.Next() {
		var a Attempt
		var started, ms int64
		if err := rows.Scan(&a.Attempt, &started, &ms, &a.Status, &a.Error, &a.Response); err != nil {
			return nil, fmt.Errorf("%w: attempts: %w", ErrUnavailable, err)
		}
		a.StartedAt, a.Duration = time.UnixMilli(started), time.Duration(ms)*time.Millisecond
		out = append(out, a)
	}
	return out, rows.Err()
}

// Meta returns a stored fact, "" if unset.
func (s *Store) Meta(ctx context.Context, key string) (string, error) {
	var v string
	err := s.r.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = ?`, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("%w: meta: %w", ErrUnavailable, err)
	}
	return v, nil
}

// MetaKeys returns the keys of the stored facts that begin with prefix,
// in order.
func (s *Store) MetaKeys(ctx context.Context, prefix string) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT key FROM meta WHERE substr(key, 1, ?) = ? ORDER BY key`, len(prefix), prefix)
	if err != nil {
		return nil, fmt.Errorf("%w: meta: %w", ErrUnavailable, err)
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, fmt.Errorf("%w: meta: %w", ErrUnavailable, err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%w: meta: %w", ErrUnavailable, err)
	}
	return keys, nil
}

// SetMeta stores a fact.
func (s *Store) SetMeta(ctx context.Context, key, value string) error {
	return s.write(ctx, func(tx *sql.Tx) error { return setMeta(tx, key, value) })
}

// setMeta stores a fact in tx.
func setMeta(tx *sql.Tx, key, value string) error {
	_, err := tx.Exec(`INSERT INTO meta (key, value) VALUES (?, ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`, key, value)
	return err
}

// publishedSinceQuery is PublishedSince's query for n (route, source,
// since) rows, a table of values (one OR term per route would hit
// SQLite's expression depth limit at about 1,000), and the stream
// sequence condition cond. A route from the start (since 0) costs one
// lookup of (event, route) per event, as one received after its since
// does; one received before costs a second only if the route has a
// delivery of it. The deliveries' routes come in one string, those not
// terminal marked by a leading \x01.
func publishedSinceQuery(cond string, n int) string {
	return `
		WITH r(route, source, since) AS (VALUES ` + strings.Repeat("(?, ?, ?), ", n-1) + `(?, ?, ?))
		SELECT e.seq, e.source, e.event_id, e.event_type, e.received_at,
			(SELECT group_concat(CASE WHEN d.state IN ('succeeded', 'dead', 'filtered') THEN d.route ELSE char(1) || d.route END, char(0))
			 FROM deliveries d WHERE d.event_seq = e.seq)
		FROM published p CROSS JOIN events e ON e.seq = p.seq
		WHERE ` + cond + ` AND EXISTS (SELECT 1 FROM r WHERE r.source = e.source
			AND (e.received_at >= r.since OR EXISTS (SELECT 1 FROM deliveries d
				WHERE d.event_seq = e.seq AND d.route = r.route))
			AND NOT EXISTS (SELECT 1 FROM deliveries d
				WHERE d.event_seq = e.seq AND d.route = r.route AND d.state IN ('succeeded', 'dead', 'filtered')))
		ORDER BY p.seq`
}

// RouteTakes is what PublishedSince needs of a route: the sources it
// takes, and since when (unix ms): an event received before Since is the
// route's only if the route has a delivery of it.
type RouteTakes struct {
	Sources []string
	Since   int64
}

// PublishedSince calls fn for every published event whose stream sequence
// is above minStreamSeq (every published event when minStreamSeq < 0) that
// some route of routes takes from the event's source and has not
// finished: its delivery of it is not terminal, or it has none and the
// event was received at or after the route's Since. fn gets the routes
// with a delivery of the event, true for those whose delivery is terminal.
// The rest are skipped inside SQLite: on a new stream this reads the whole
// store, and a row handed to Go costs more than the row's own read. Bodies
// are not loaded.
func (s *Store) PublishedSince(ctx context.Context, minStreamSeq int64, routes map[string]RouteTakes,
	fn func(ev *Event, deliveries map[string]bool) error) error {
	cond := `p.stream_seq > ?`
	if minStreamSeq < 0 {
		cond = `? < 0`
	}
	var args []any
	for _, name := range slices.Sorted(maps.Keys(routes)) {
		for _, src := range routes[name].Sources {
			args = append(args, name, src, routes[name].Since)
		}
	}
	if len(args) == 0 {
		return nil
	}
	args = append(args, minStreamSeq)
	rows, err := s.r.QueryContext(ctx, publishedSinceQuery(cond, len(args)/3), args...)
	if err != nil {
		return fmt.Errorf("%w: published events: %w", ErrUnavailable, err)
	}
	defer rows.Close()
	for rows.Next() {
		var ev Event
		var received int64
		var dl sql.NullString
		if err := rows.Scan(&ev.Seq, &ev.Source, &ev.ID, &ev.Type, &received, &dl); err != nil {
			return fmt.Errorf("%w: published events: %w", ErrUnavailable, err)
		}
		ev.ReceivedAt = time.UnixMilli(received)
		deliveries := map[string]bool{}
		if dl.Valid {
			for _, r := range strings.Split(dl.String, "\x00") {
				open := strings.HasPrefix(r, "\x01")
				deliveries[strings.TrimPrefix(r, "\x01")] = !open
			}
		}
		if err := fn(&ev, deliveries); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%w: published events: %w", ErrUnavailable, err)
	}
	return nil
}

// state != 'succeeded' lets the planner take the partial deliveries_state;
// asked of each state in turn (pending, retrying), it reads in its order.
const pendingDeliveriesQuery = `
	SELECT event_seq, route, source, event_type, reset_at IS NOT NULL FROM deliveries
	WHERE state = ? AND (state = 'pending' OR reset_at IS NOT NULL) AND state != 'succeeded' AND event_seq > 0
	ORDER BY created_at, id`

// PendingDeliveries calls fn for every delivery in state pending, with its
// event's intake sequence, route, source and type; reset is true for one
// an operator set pending (SetDeliveryState, ResetDelivery) since its
// event was last requeued anew (Requeue): only an operator's round makes
// such a delivery pending again before that. A retrying delivery so
// reset is called with reset true too: a replay's new delivery whose
// failed round was recorded, its event not yet requeued anew (nothing
// else carries its next round; one whose message is in the stream gets
// a second copy, as harmless as any).
func (s *Store) PendingDeliveries(ctx context.Context, fn func(seq int64, route, source, eventType string, reset bool) error) error {
	for _, state := range []string{StatePending, StateRetrying} {
		if err := s.pendingDeliveries(ctx, state, fn); err != nil {
			return err
		}
	}
	return nil
}

// pendingDeliveries is PendingDeliveries of the deliveries in state.
func (s *Store) pendingDeliveries(ctx context.Context, state string, fn func(seq int64, route, source, eventType string, reset bool) error) error {
	rows, err := s.r.QueryContext(ctx, pendingDeliveriesQuery, state)
	if err != nil {
		return fmt.Errorf("%w: pending deliveries: %w", ErrUnavailable, err)
	}
	defer rows.Close()
	for rows.Next() {
		var seq int64
		var route, source, typ string
		var reset bool
		if err := rows.Scan(&seq, &route, &source, &typ, &reset); err != nil {
			return fmt.Errorf("%w: pending deliveries: %w", ErrUnavailable, err)
		}
		if err := fn(seq, route, source, typ, reset); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%w: pending deliveries: %w", ErrUnavailable, err)
	}
	return nil
}

// Requeue puts published events back in the outbox, to be published
// again: those of anew marked with the time of this requeue
// (Event.RequeuedAt: published anew, under an ID of their own), those of
// seqs as they were first published. An event another gateway took from
// its sender (its record, or a copy claimed elsewhere) goes anew from
// either list: only anew is published without a claim, which its holder
// has. One of anew that is parked leaves the parked events for the
// outbox: its new message carries an operator's round (the relay parks it
// again if the broker still refuses it). A seq that is not published here
// is left alone, but for one of anew parked or another gateway published
// (one in both lists is requeued anew). The operators' resets of an event
// requeued anew are done with (reset_at cleared): its new message holds
// them, and a round of that message cut short later is requeued as any
// other.
func (s *Store) Requeue(ctx context.Context, seqs, anew []int64) error {
	if len(seqs) == 0 && len(anew) == 0 {
		return nil
	}
	now := time.Now().UnixMilli()
	requeue := func(tx *sql.Tx, seq int64, at any) error {
		reset := at != nil // an operator's
		var others bool
		if err := tx.QueryRow(`SELECT EXISTS (SELECT 1 FROM replica_events WHERE seq = ?)
			OR EXISTS (SELECT 1 FROM claimed_elsewhere WHERE seq = ?)`, seq, seq).Scan(&others); err != nil {
			return err
		}
		if others {
			at = now
		}
		was, err := changed(tx.Exec(`DELETE FROM published WHERE seq = ?`, seq))
		if err != nil {
			return err
		}
		if !was && reset {
			// Parked: the broker is asked again, anew (parked again if
			// it still refuses).
			if was, err = changed(tx.Exec(`DELETE FROM parked WHERE seq = ?`, seq)); err != nil {
				return err
			}
		}
		switch {
		case was:
			_, err = tx.Exec(`INSERT INTO outbox (seq, requeued_at) VALUES (?, ?)`, seq, at)
		case others && reset:
			// Published by another gateway: published anew from here
			// all the same, an operator here having reset its delivery.
			was, err = changed(tx.Exec(`INSERT INTO outbox (seq, requeued_at) SELECT ?, ?
				WHERE NOT EXISTS (SELECT 1 FROM outbox WHERE seq = ?)`, seq, at, seq))
		}
		if err != nil || !was || at == nil {
			return err
		}
		_, err = tx.Exec(`UPDATE deliveries SET reset_at = NULL WHERE event_seq = ? AND reset_at IS NOT NULL`, seq)
		return err
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		for _, seq := range anew {
			if err := requeue(tx, seq, now); err != nil {
				return err
			}
		}
		for _, seq := range seqs {
			if err := requeue(tx, seq, nil); err != nil {
				return err
			}
		}
		return nil
	})
}
