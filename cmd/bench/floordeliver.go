package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/outbound"
)

// The delivering floor: the durable floor plus the least any durable
// gateway does to deliver each event once. After a fresh claim's commit
// the event goes to a bounded in-memory queue; n workers (the route's
// concurrency) POST its stored body to the downstream with
// X-Hookgate-Event-Id, Idempotency-Key and Content-Type over one shared
// keep-alive client, and record the outcome (delivered_at, status) through
// the same one writer, in the same group commits as the claims. A worker
// takes its next event only after its outcome's commit, so at most n
// deliveries are in flight. A failed POST is recorded as failed (status
// 0): no retries, no signatures, no broker.
//
// When the queue is full the claim is still answered after its commit: the
// event waits in the store, and the read-back (readBack) reads the
// undelivered rows into the queue, in rowid order, as room comes.

// floorQueue is the delivery queue's capacity: beyond it the events wait
// in the store (4096 events of 1 KiB: 4 MiB of bodies in memory).
const floorQueue = 4096

// floorRoute and floorSource name the Idempotency-Key's route and source:
// the bench's one route and its one (Stripe) source.
const (
	floorRoute  = "bench"
	floorSource = "stripe"
)

// floorSchemaDelivering is the delivering floor's table: the floor's, and
// each event's outcome.
const floorSchemaDelivering = `CREATE TABLE IF NOT EXISTS events (id TEXT PRIMARY KEY, body BLOB NOT NULL, received_at INTEGER NOT NULL, delivered_at INTEGER, status INTEGER)`

// floorJob is one event to deliver.
type floorJob struct {
	rowid int64
	id    string
	body  []byte
	msg   natsjs.Msg // the brokered floor's message, acked after the outcome's commit
}

// floorOutcome is one delivery's outcome waiting for the writer; done gets
// the error of its transaction.
type floorOutcome struct {
	id     string
	at     int64 // unix ms
	status int   // HTTP status; 0 if the POST failed
	done   chan error
}

// floorDeliverer is the delivering floor's queue, workers and read-back;
// for the brokered floor (floorbroker.go) the queue is what is to be
// published, and the workers take the consumer's messages.
type floorDeliverer struct {
	url      string
	client   *http.Client
	queue    chan floorJob
	in       chan floorJob // what the workers take: queue, or the broker's messages
	broker   *floorBroker  // nil but for the brokered floor
	outcomes chan *floorOutcome
	read     *sql.DB // the read-back's own connection
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	mu       sync.Mutex
	overflow bool  // the queue was full: events after cursor wait in the store
	cursor   int64 // with overflow: the last rowid queued
	wake     chan struct{}

	delivered, failed, readBackRows atomic.Int64
}

// openDeliveringFloor opens (or creates) the delivering floor's store in
// dir and starts its writer, n delivery workers posting to url, and the
// read-back; queue is the queue's capacity. With brokered, the brokered
// floor: the events go through an embedded JetStream server.
func openDeliveringFloor(dir, url string, n, queue int, brokered bool) (*floorStore, error) {
	path := filepath.Join(dir, "floor.db")
	db, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL&_synchronous=FULL&_busy_timeout=5000")
	if err != nil {
		return nil, fmt.Errorf("floor: open: %w", err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(floorSchemaDelivering); err != nil {
		return nil, errors.Join(fmt.Errorf("floor: schema: %w", err), db.Close())
	}
	read, err := sql.Open("sqlite3", "file:"+path+"?_query_only=1&_busy_timeout=5000")
	if err != nil {
		return nil, errors.Join(fmt.Errorf("floor: open reader: %w", err), db.Close())
	}
	read.SetMaxOpenConns(1)
	ctx, cancel := context.WithCancel(context.Background())
	d := &floorDeliverer{
		url: url,
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			MaxIdleConns: 2 * n, MaxIdleConnsPerHost: 2 * n, IdleConnTimeout: 2 * time.Minute,
		}},
		queue:    make(chan floorJob, queue),
		outcomes: make(chan *floorOutcome, n),
		read:     read,
		cancel:   cancel,
		wake:     make(chan struct{}, 1),
	}
	d.in = d.queue
	if brokered {
		if d.broker, err = startFloorBroker(ctx, dir, n); err != nil {
			cancel()
			return nil, errors.Join(err, read.Close(), db.Close())
		}
		d.in = make(chan floorJob, n)
		d.wg.Add(2)
		go d.broker.publish(ctx, d.queue, &d.wg)
		go d.broker.consume(ctx, d.in, &d.wg)
	}
	s := &floorStore{db: db, claims: make(chan *floorClaim, 4*floorBatch), done: make(chan struct{}), deliver: d}
	go s.writeDelivering()
	d.wg.Add(n + 1)
	for range n {
		go d.work(ctx)
	}
	go d.readBack(ctx)
	return s, nil
}

// writeDelivering is the delivering floor's one writer: it takes the
// claims (up to floorBatch) and the outcomes waiting, commits them in one
// transaction, queues the fresh events, then answers each.
func (s *floorStore) writeDelivering() {
	defer close(s.done)
	d := s.deliver
	batch := make([]*floorClaim, 0, floorBatch)
	rowids := make([]int64, 0, floorBatch)
	var outs []*floorOutcome
	for closed := false; !closed; {
		batch, outs = batch[:0], outs[:0]
		select {
		case c, ok := <-s.claims:
			if !ok {
				return
			}
			batch = append(batch, c)
		case o := <-d.outcomes:
			outs = append(outs, o)
		}
	more:
		for len(batch) < floorBatch {
			select {
			case c, ok := <-s.claims:
				if !ok {
					closed = true
					break more
				}
				batch = append(batch, c)
			case o := <-d.outcomes:
				outs = append(outs, o)
			default:
				break more
			}
		}
		rowids = rowids[:len(batch)]
		err := s.commitDelivering(batch, rowids, outs)
		if err == nil {
			d.dispatch(batch, rowids)
		}
		for i, c := range batch {
			c.done <- floorResult{fresh: err == nil && rowids[i] != 0, err: err}
		}
		for _, o := range outs {
			o.done <- err
		}
	}
}

// commitDelivering claims the batch (rowids[i] the new row's, 0 for a
// repeat) and records the outcomes, in one transaction.
func (s *floorStore) commitDelivering(batch []*floorClaim, rowids []int64, outs []*floorOutcome) error {
	return s.inTx(func(tx *sql.Tx) error {
		if len(batch) > 0 {
			ins, err := tx.Prepare(`INSERT INTO events (id, body, received_at) VALUES (?, ?, ?) ON CONFLICT(id) DO NOTHING RETURNING rowid`)
			if err != nil {
				return fmt.Errorf("floor: prepare: %w", err)
			}
			defer ins.Close()
			for i, c := range batch {
				switch err := ins.QueryRow(c.id, c.body, c.at).Scan(&rowids[i]); {
				case errors.Is(err, sql.ErrNoRows):
					rowids[i] = 0
				case err != nil:
					return fmt.Errorf("floor: claim: %w", err)
				}
			}
		}
		if len(outs) > 0 {
			upd, err := tx.Prepare(`UPDATE events SET delivered_at = ?, status = ? WHERE id = ?`)
			if err != nil {
				return fmt.Errorf("floor: prepare outcome: %w", err)
			}
			defer upd.Close()
			for _, o := range outs {
				if _, err := upd.Exec(o.at, o.status, o.id); err != nil {
					return fmt.Errorf("floor: outcome: %w", err)
				}
			}
		}
		return nil
	})
}

// dispatch queues the batch's fresh events, after their commit. It never
// blocks the writer: once the queue is full, this and every later fresh
// event waits in the store until the read-back has caught up.
func (d *floorDeliverer) dispatch(batch []*floorClaim, rowids []int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, c := range batch {
		if rowids[i] == 0 || d.overflow {
			continue
		}
		select {
		case d.queue <- floorJob{rowid: rowids[i], id: c.id, body: c.body}:
		default:
			// Rowids grow with each insert (no row is deleted): every row
			// after cursor is one not queued.
			d.overflow, d.cursor = true, rowids[i]-1
			select {
			case d.wake <- struct{}{}:
			default:
			}
		}
	}
}

// readBack reads the rows that found the queue full, in rowid order, into
// the queue (blocking there, never holding mu), until none is left; then
// the writer queues fresh events again.
func (d *floorDeliverer) readBack(ctx context.Context) {
	defer d.wg.Done()
	// pause logs a failed read and waits before the next; false once
	// stopping.
	pause := func(err error) bool {
		if ctx.Err() != nil {
			return false
		}
		logf("floor: read-back: %v", err)
		time.Sleep(100 * time.Millisecond)
		return true
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
		}
		for {
			d.mu.Lock()
			cursor := d.cursor
			d.mu.Unlock()
			jobs, err := d.readAfter(ctx, cursor, 512)
			if err != nil {
				if !pause(err) {
					return
				}
				continue
			}
			if len(jobs) == 0 {
				// Under mu the writer queues nothing: if nothing is left
				// after cursor now, whatever commits next is the writer's
				// to queue.
				d.mu.Lock()
				jobs, err = d.readAfter(ctx, cursor, 1)
				if err == nil && len(jobs) == 0 {
					d.overflow = false
					d.mu.Unlock()
					break
				}
				d.mu.Unlock()
				if err != nil && !pause(err) {
					return
				}
				continue
			}
			for _, j := range jobs {
				select {
				case d.queue <- j:
				case <-ctx.Done():
					return
				}
			}
			d.readBackRows.Add(int64(len(jobs)))
			d.mu.Lock()
			d.cursor = jobs[len(jobs)-1].rowid
			d.mu.Unlock()
		}
	}
}

// readAfter reads up to limit rows after rowid cursor.
func (d *floorDeliverer) readAfter(ctx context.Context, cursor int64, limit int) ([]floorJob, error) {
	rows, err := d.read.QueryContext(ctx, `SELECT rowid, id, body FROM events WHERE rowid > ? ORDER BY rowid LIMIT ?`, cursor, limit)
	if err != nil {
		return nil, fmt.Errorf("floor: read back: %w", err)
	}
	defer rows.Close()
	var jobs []floorJob
	for rows.Next() {
		var j floorJob
		if err := rows.Scan(&j.rowid, &j.id, &j.body); err != nil {
			return nil, fmt.Errorf("floor: read back: %w", err)
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("floor: read back: %w", err)
	}
	return jobs, nil
}

// work is one delivery worker: an event from the queue, its POST, its
// outcome committed, then the next.
func (d *floorDeliverer) work(ctx context.Context) {
	defer d.wg.Done()
	o := &floorOutcome{done: make(chan error, 1)}
	for {
		var j floorJob
		select {
		case j = <-d.in:
		case <-ctx.Done():
			return
		}
		status := d.post(ctx, j)
		if ctx.Err() != nil {
			return // shutting down: the row stays undelivered
		}
		o.id, o.at, o.status = j.id, time.Now().UnixMilli(), status
		d.outcomes <- o
		if err := <-o.done; err != nil {
			logf("floor: %v", err)
		} else if j.msg != nil {
			if err := j.msg.Ack(); err != nil {
				logf("floor: ack %s: %v", j.id, err)
			}
		}
		if status >= 200 && status < 300 {
			d.delivered.Add(1)
		} else {
			d.failed.Add(1)
		}
	}
}

// post sends the event's stored body to the downstream: its status, or 0
// if the request failed.
func (d *floorDeliverer) post(ctx context.Context, j floorJob) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url, bytes.NewReader(j.body))
	if err != nil {
		return 0
	}
	req.Header["Content-Type"] = []string{"application/json"}
	req.Header["Idempotency-Key"] = []string{outbound.IdempotencyKey(floorRoute, floorSource, j.id)}
	req.Header["X-Hookgate-Event-Id"] = []string{j.id}
	resp, err := d.client.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body) // read to the end, so the connection is kept
	if err := resp.Body.Close(); err != nil {
		return 0
	}
	return resp.StatusCode
}

// stop ends the workers (each after its current delivery; one cut short
// is not recorded) and the read-back, before the writer stops.
func (d *floorDeliverer) stop() error {
	d.cancel()
	if d.broker != nil {
		d.broker.msgs.Stop() // ends consume's wait for a message
	}
	d.wg.Wait()
	if d.broker != nil {
		d.broker.close()
	}
	d.client.CloseIdleConnections()
	if n := d.failed.Load(); n > 0 {
		logf("floor: %d of %d deliveries failed", n, n+d.delivered.Load())
	}
	return d.read.Close()
}

// deliveringFloorRun is what the bench measured on the delivering floor,
// as on the gateway: the closed loop (intake with delivery running), then
// the drain until every accepted event was delivered.
type deliveringFloorRun struct {
	name                     string // "delivering floor" or "brokered floor"
	workers                  int
	intake                   result
	intakeCPU, drainCPU      cpuSplit
	endToEnd                 float64       // distinct delivered / (last delivered - first accepted)
	deliveryTime, drainTime  time.Duration // first accepted → last delivered; the drain
	accepted, drainDelivered int64
	throughCPU               float64 // server CPU µs per event delivered, from the loop to the last delivery
	delivered, requests      int64   // at the downstream: distinct events, requests
	drained                  bool
}

// runDeliveringFloor measures the delivering floor (this binary with
// -floor -floor-deliver), its own process, on a downstream of its own (so
// that the gateway's counts are untouched): warm-up, -bare-duration closed
// loop, then the wait until every accepted event is delivered.
func runDeliveringFloor(ctx context.Context, o *options, dir, tag, self string, brokered bool) (deliveringFloorRun, error) {
	name, sub, args := "delivering floor", "floor-deliver", []string(nil)
	if brokered {
		name, sub, args = "brokered floor", "floor-broker", []string{"-floor-broker"}
	}
	dr := deliveringFloorRun{name: name, workers: o.routeConcurrency}
	ds, err := startDownstream()
	if err != nil {
		return dr, fmt.Errorf("%s: %w", name, err)
	}
	defer ds.close()
	floorDir := filepath.Join(dir, sub)
	if err := os.MkdirAll(floorDir, 0o750); err != nil {
		return dr, err
	}
	addr, err := freeAddr()
	if err != nil {
		return dr, err
	}
	args = append(args, "-floor-dir", floorDir, "-floor-deliver", ds.url(), "-floor-concurrency", strconv.Itoa(o.routeConcurrency), "-floor", addr)
	p, err := startProc(name, filepath.Join(dir, sub+".log"), append([]string{self}, args...)...)
	if err != nil {
		return dr, err
	}
	err = waitHTTP(p, addr, 30*time.Second)
	if err == nil {
		l := newLoader(addr, o.conns, o.size, o.repeat, tag)
		l.random = o.randomIDs
		logf("%s: warm-up %s, then %s closed loop over %d connections, %d delivery workers", name, o.warmup, o.bareDuration, o.conns, o.routeConcurrency)
		l.closedLoop(ctx, o.warmup)
		m := measureCPU(p)
		distinct0 := ds.distinct.Load()
		dr.intake = l.closedLoop(ctx, o.bareDuration)
		dr.intakeCPU = m.done()
		dr.accepted = l.accepted.Load()
		d0, t0, m := ds.distinct.Load(), time.Now(), measureCPU(p)
		dr.drained = waitDelivered(ctx, ds, dr.accepted, o.drainTimeout)
		dr.drainCPU, dr.drainTime, dr.drainDelivered = m.done(), time.Since(t0), ds.distinct.Load()-d0
		dr.throughCPU = cpuPerDelivered(dr.intakeCPU, dr.intake.elapsed, dr.drainCPU, dr.drainTime, d0+dr.drainDelivered-distinct0)
		if first := l.firstAccepted.Load(); first > 0 {
			dr.deliveryTime = time.Duration(ds.last.Load() - first)
			if dr.deliveryTime > 0 {
				dr.endToEnd = float64(min(ds.distinct.Load(), dr.accepted)) / dr.deliveryTime.Seconds()
			}
		}
		dr.delivered, dr.requests = ds.distinct.Load(), ds.requests.Load()
		l.closeIdle()
		logf("%s: %.0f events/s intake; %d of %d accepted events delivered, %.0f events/s end to end", name,
			dr.intake.rate(), dr.delivered, dr.accepted, dr.endToEnd)
	}
	err = errors.Join(err, p.Stop(10*time.Second))
	if err != nil {
		return dr, fmt.Errorf("%s: %w", name, err)
	}
	return dr, ctx.Err()
}

// writeRow writes the delivering floor's row (nothing if not measured).
func (dr deliveringFloorRun) writeRow(b *strings.Builder, o *options) {
	if dr.intake.rate() <= 0 {
		return
	}
	drained := ""
	if !dr.drained {
		drained = " (not all delivered within -drain-timeout)"
	}
	fmt.Fprintf(b, "| %s (%d workers), same load (%s): intake events/s; end to end events/s over %s%s; server CPU per event at peak; per event delivered, from the loop to the last delivery | %s; %s; %.0f µs; %.0f µs | | |\n",
		dr.name, dr.workers, o.bareDuration, dr.deliveryTime.Round(10*time.Millisecond), drained,
		num(dr.intake.rate()), num(dr.endToEnd), dr.intakeCPU.server*1e6/dr.intake.rate(), dr.throughCPU)
}

// writeCPURow writes the delivering floor's CPU, at peak and in the drain,
// and its downstream's counts.
func (dr deliveringFloorRun) writeCPURow(b *strings.Builder) {
	if dr.intake.rate() <= 0 {
		return
	}
	drain := "delivery kept up: nothing left after the loop"
	switch {
	case !dr.drained:
		drain = "not all delivered within -drain-timeout (see the floor's log for failed deliveries)"
	case dr.drainDelivered > 0:
		drain = fmt.Sprintf("the drain: %s delivered in %s, server CPU per delivery %.0f µs, %s", num(float64(dr.drainDelivered)),
			dr.drainTime.Round(10*time.Millisecond), dr.drainCPU.server*1e6*dr.drainTime.Seconds()/float64(dr.drainDelivered), dr.drainCPU)
	}
	fmt.Fprintf(b, "| CPU on the %s at peak: server / bench / other / stolen; after it; its downstream: distinct events / requests | %s; %s; %d / %d | | |\n",
		dr.name, dr.intakeCPU, drain, dr.delivered, dr.requests)
}

// cpuPerDelivered is the server's CPU in µs per event delivered over a
// closed loop and the drain after it (cores × seconds of each, over the
// events delivered in both): intake and delivery of each event, and of the
// repeats answered. The warm-up's backlog is delivered in it but was taken
// in before: a small underestimate when the warm-up left one. 0 if nothing
// was delivered.
func cpuPerDelivered(loop cpuSplit, loopTime time.Duration, drain cpuSplit, drainTime time.Duration, delivered int64) float64 {
	if delivered <= 0 {
		return 0
	}
	return (loop.server*loopTime.Seconds() + drain.server*drainTime.Seconds()) * 1e6 / float64(delivered)
}
