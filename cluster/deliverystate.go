package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/store"
)

// DeliveryStateConfig configures NewDeliveryState; zero values take the
// stated defaults.
type DeliveryStateConfig struct {
	// Bucket is the KV bucket of delivery states (Deployment's
	// Deliveries). Default "HOOKGATE_DELIVERIES".
	Bucket string
	// Replicas of the bucket. Default 1.
	Replicas int
	// TTL is how long a delivery's state is kept after its last change:
	// at least twice the longest schedule step of Routes and Tasks (a
	// delivery waiting for its next round is never forgotten). Default
	// 720h.
	TTL time.Duration
	// Owner names this process in the leases it holds. Default
	// "<hostname>:<pid>:<start, unix ms>".
	Owner string
	// Routes and Tasks bound each route's rounds: a round's lease is its
	// longest run (LeaseFor) plus LeaseMargin.
	Routes []outbound.Route
	Tasks  *outbound.Tasks
	// LeaseMargin is added to a round's longest run. Default 30s.
	LeaseMargin time.Duration
	// Wait bounds each KV request; a claim not made within it is not made.
	// Default 5s.
	Wait time.Duration
	// UntilElected, if set, cuts the bucket's lookup short at its leader
	// election, where a creation not answered yet looks up what was made.
	UntilElected UntilElected
	// Replica, if set, records each round in the local store with its
	// record for the other gateways (store.RecordClusterRound, see
	// Records), under the gateway name Origin, and OnRecorded (if set) is
	// called after each record written; an operator's reset has its
	// record too (Reset). Unset, rounds are recorded with the local
	// StatusRecorder's RecordRound, and resets have none.
	Replica    ClusterRoundRecorder
	Origin     string
	OnRecorded func()
}

// ClusterRoundRecorder records a round, or a state changed without one,
// with its record (store.Store).
type ClusterRoundRecorder interface {
	RecordClusterRound(ctx context.Context, d *store.Delivery, attempts []store.Attempt, c store.ClusterRound) error
	RecordClusterState(ctx context.Context, rec *store.StateRecord) error
}

// DeliveryState is an outbound.DeliveryState shared by every gateway of a
// cluster: each delivery's state, attempts, rounds and the lease of its
// running round live in one JetStream KV entry, changed only by
// compare-and-set on its revision. A round runs only under a lease this
// process wrote; its outcome is written with the revision of that lease
// (a fencing token), so a gateway whose lease another took over cannot
// overwrite what the other recorded. Every round is also recorded in the
// local store, where it ran.
type DeliveryState struct {
	js     func() natsjs.JetStream // the broker's current one
	local  outbound.StatusRecorder
	cfg    DeliveryStateConfig
	leases map[string]time.Duration // by route
	lease  time.Duration            // of a route not in leases
	log    *slog.Logger
	now    func() time.Time

	kvMu sync.Mutex
	kv   natsjs.KeyValue  // nil until the bucket is made
	kvJS natsjs.JetStream // the context kv was got from

	mu      sync.Mutex
	held    map[string]*claim // by KV key
	failing failures          // of claims

	// Outcomes tried again in the background (releaseLater): bg ends
	// with Stop, which waits for them; shutdown bounds their last try.
	bg       context.Context
	bgStop   context.CancelFunc
	later    sync.WaitGroup
	stopped  bool            // under mu
	shutdown context.Context // set before bgStop
}

// claim is a lease this process holds: the entry as it wrote it, and its
// revision. rev is 0 while the claim is being made. Its fields are read
// and written under DeliveryState.mu (a replay reads a status while a
// round records).
type claim struct {
	rev      uint64
	rec      record
	recorded bool // the round's outcome was written, ending the lease
	unreset  bool // Unreset put back the state a reset wrote over
	// outcome: Record could not write the round's outcome (rec): Release
	// writes it. unsent is that round, which (with Replica) is then
	// recorded with its record.
	outcome bool
	unsent  *unsentRound
	until   time.Time // the lease's end
}

// unsentRound is a round recorded locally only, waiting for its outcome's
// revision in the bucket.
type unsentRound struct {
	d        store.Delivery
	attempts []store.Attempt
	c        store.ClusterRound
}

// record is a delivery's KV entry.
type record struct {
	State    string `json:"state,omitempty"` // "": no round recorded in the cluster yet
	Attempts int    `json:"attempts,omitempty"`
	Rounds   int    `json:"rounds,omitempty"`
	Next     int64  `json:"next,omitempty"`   // next attempt, unix ms (retrying)
	Status   int    `json:"status,omitempty"` // the last attempt's status
	Owner    string `json:"owner,omitempty"`  // the holder of the running round's lease
	Lease    int64  `json:"lease,omitempty"`  // the lease's end, unix ms
}

// Defaults of DeliveryStateConfig.
const (
	DefaultBucket      = "HOOKGATE_DELIVERIES"
	DefaultTTL         = 720 * time.Hour
	DefaultLeaseMargin = 30 * time.Second
	DefaultWait        = 5 * time.Second
)

// ErrFenced is Record's error when the round's lease was taken over: its
// outcome is recorded locally only.
var ErrFenced = errors.New("cluster: the round's lease was taken over by another gateway")

// claimPoll is how often Claim tries again.
const claimPoll = 250 * time.Millisecond

// NewDeliveryState returns the cluster delivery state over js (called at
// each use: the broker's current context, which changes when the broker
// connects anew), recording every round in local too. The bucket is made at first use (and tried
// again at each use until made).
func NewDeliveryState(js func() natsjs.JetStream, local outbound.StatusRecorder, cfg DeliveryStateConfig, log *slog.Logger) *DeliveryState {
	if cfg.Bucket == "" {
		cfg.Bucket = DefaultBucket
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Owner == "" {
		host, _ := os.Hostname()
		cfg.Owner = host + ":" + strconv.Itoa(os.Getpid()) + ":" + strconv.FormatInt(time.Now().UnixMilli(), 10)
	}
	if cfg.LeaseMargin <= 0 {
		cfg.LeaseMargin = DefaultLeaseMargin
	}
	if cfg.Wait <= 0 {
		cfg.Wait = DefaultWait
	}
	s := &DeliveryState{js: js, local: local, cfg: cfg, leases: map[string]time.Duration{}, log: log,
		now: time.Now, held: map[string]*claim{}}
	s.bg, s.bgStop = context.WithCancel(context.Background())
	s.lease = LeaseFor(outbound.Route{}) + cfg.LeaseMargin
	var longest time.Duration
	for _, r := range cfg.Routes {
		s.leases[r.Name] = LeaseFor(r) + cfg.LeaseMargin
		longest = max(longest, longestStep(r.Schedule))
	}
	if t := cfg.Tasks; t != nil {
		s.leases[outbound.TaskRoute] = LeaseFor(outbound.Route{Timeout: t.Timeout, Retries: t.Retries,
			RetryWaitMax: t.RetryWaitMax}) + cfg.LeaseMargin
		longest = max(longest, longestStep(t.Schedule))
	}
	s.cfg.TTL = max(s.cfg.TTL, 2*longest)
	return s
}

// LeaseFor is the longest a round of r runs: every attempt timing out,
// with the longest wait between them (Timeout × (Retries+1) + RetryWaitMax
// × Retries), defaults filled in.
func LeaseFor(r outbound.Route) time.Duration {
	timeout, waitMax := r.Timeout, r.RetryWaitMax
	if timeout <= 0 {
		timeout = outbound.DefaultTimeout
	}
	if waitMax <= 0 {
		waitMax = outbound.DefaultRetryWaitMax
	}
	retries := max(r.Retries, 0)
	return timeout*time.Duration(retries+1) + waitMax*time.Duration(retries)
}

func longestStep(schedule []time.Duration) time.Duration {
	if schedule == nil {
		schedule = outbound.DefaultSchedule()
	}
	var m time.Duration
	for _, d := range schedule {
		m = max(m, d)
	}
	return m
}

// DeliveryKey is the KV key of a delivery: its route and its Idempotency-Key,
// which stands for (route, source, event ID) in KV's key alphabet.
func DeliveryKey(route, source, eventID string) string {
	return route + "." + outbound.IdempotencyKey(route, source, eventID)
}

// claimable decides whether a round may be claimed on an entry (found
// false: no entry): when no lease is running, or the running one is this
// owner's (left by a release that could not be written) or has ended.
// The claim is then written by compare-and-set on the entry's revision.
func claimable(cur record, found bool, owner string, now time.Time) bool {
	return !found || cur.Owner == "" || cur.Owner == owner || now.UnixMilli() >= cur.Lease
}

// after is the entry a round's outcome writes over the claimed one:
// where the delivery stands, its attempts in the whole cluster, and no
// lease.
func after(claimed record, d *store.Delivery, attempts int) record {
	r := record{State: d.State, Attempts: claimed.Attempts + attempts, Rounds: d.Rounds, Status: d.LastStatus}
	if !d.NextAttemptAt.IsZero() {
		r.Next = d.NextAttemptAt.UnixMilli()
	}
	return r
}

// status is where an entry says the delivery stands.
func (r record) status(id int64) store.DeliveryStatus {
	ds := store.DeliveryStatus{ID: id, State: r.State, Attempts: r.Attempts, Rounds: r.Rounds}
	if r.Next != 0 {
		ds.NextAttemptAt = time.UnixMilli(r.Next)
	}
	return ds
}

// bucket is the KV bucket: looked up, else created, or updated to the
// config where it differs, bounded by Wait, at the first use on each
// connection. A failure is tried again at the next use; a bucket
// JetStream refused to update is used as it is (logged).
func (s *DeliveryState) bucket(ctx context.Context) (natsjs.KeyValue, error) {
	kv, err := s.open(ctx)
	if kv == nil {
		return nil, err
	}
	return kv, nil
}

// Ensure creates the bucket, or updates it to the config; a
// *RefusedError says JetStream refused the update (the bucket is used as
// it is).
func (s *DeliveryState) Ensure(ctx context.Context) error {
	_, err := s.open(ctx)
	return err
}

func (s *DeliveryState) open(ctx context.Context) (natsjs.KeyValue, error) {
	s.kvMu.Lock()
	defer s.kvMu.Unlock()
	js := s.js()
	if s.kv != nil && s.kvJS == js {
		return s.kv, nil
	}
	if js == nil {
		return nil, errors.New("cluster: delivery state: not connected to nats")
	}
	tctx, cancel := context.WithTimeout(ctx, s.cfg.Wait)
	defer cancel()
	kv, err := ensureBucket(tctx, js, natsjs.KeyValueConfig{
		Bucket:      s.cfg.Bucket,
		Description: "hookgate delivery states and round leases",
		History:     1,
		TTL:         s.cfg.TTL,
		Replicas:    s.cfg.Replicas,
		Storage:     natsjs.FileStorage,
	}, firstRevision(s.now()), s.cfg.UntilElected, s.log)
	if kv == nil {
		return nil, fmt.Errorf("cluster: delivery state bucket %s: %w", s.cfg.Bucket, err)
	}
	if err != nil {
		s.log.Warn("cluster: the delivery state bucket is used as it is", "err", err)
	}
	s.kv, s.kvJS = kv, js
	return kv, err
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// get reads a delivery's entry; found is false if there is none.
func (s *DeliveryState) get(ctx context.Context, key string) (rec record, rev uint64, found bool, err error) {
	kv, err := s.bucket(ctx)
	if err != nil {
		return rec, 0, false, err
	}
	e, err := kv.Get(ctx, key)
	switch {
	case errors.Is(err, natsjs.ErrKeyNotFound):
		return rec, 0, false, nil
	case err != nil:
		return rec, 0, false, fmt.Errorf("cluster: read delivery state: %w", err)
	}
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		// Unreadable: taken as no state, so it can be claimed and written over.
		s.log.Warn("unreadable cluster delivery state; written over", "key", key, "err", err)
		rec = record{}
	}
	return rec, e.Revision(), true, nil
}

func (s *DeliveryState) leaseOf(route string) time.Duration {
	if d, ok := s.leases[route]; ok {
		return d
	}
	return s.lease
}

// TryClaim claims the next round of k in the cluster: false while a
// round of it runs here or under another gateway's unexpired lease, and
// when the bucket cannot be reached (no round runs without the claim).
func (s *DeliveryState) TryClaim(ctx context.Context, k outbound.DeliveryKey) bool {
	key := DeliveryKey(k.Route, k.Source, k.EventID)
	s.mu.Lock()
	if _, busy := s.held[key]; busy {
		s.mu.Unlock()
		return false
	}
	c := &claim{}
	s.held[key] = c
	s.mu.Unlock()
	err := s.claim(ctx, k.Route, key, k.Fresh, c)
	s.mu.Lock()
	lvl := s.failing.level(err, s.now())
	if err != nil {
		delete(s.held, key)
	}
	s.mu.Unlock()
	if err != nil {
		if !errors.Is(err, errLeased) {
			s.log.Log(ctx, lvl, "cannot claim a delivery round in the cluster; it waits", "route", k.Route,
				"source", k.Source, "event_id", k.EventID, "err", err)
		}
		return false
	}
	return true
}

// noLeaderGrace is how long the bucket answering "no responders" (its
// stream has no leader yet: a bucket just made, a NATS leader election)
// is expected, and logged at debug level; past it, a warning.
const noLeaderGrace = 15 * time.Second

// failures is a run of failed KV requests.
type failures struct {
	since time.Time // when the run of "no responders" began; zero: none
}

// level is the level to log err at (at now) and ends the run on a
// request that got an answer (err nil or errLeased).
func (f *failures) level(err error, now time.Time) slog.Level {
	switch {
	case err == nil || errors.Is(err, errLeased):
		f.since = time.Time{}
		return slog.LevelDebug
	case !noLeader(err):
		return slog.LevelWarn
	}
	if f.since.IsZero() {
		f.since = now
	}
	if now.Sub(f.since) < noLeaderGrace {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}

// errLeased: another gateway's round runs.
var errLeased = errors.New("cluster: a round runs under another lease")

// claim writes this process's lease on key into c.
// With fresh (see outbound.DeliveryKey) it first tries to create the
// entry.
func (s *DeliveryState) claim(ctx context.Context, route, key string, fresh bool, c *claim) error {
	kv, err := s.bucket(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Wait)
	defer cancel()
	now := s.now()
	if fresh {
		// Likely no entry yet: created by one compare-and-set (on "no
		// revision"), without reading first; if there is one, read it.
		next := record{Owner: s.cfg.Owner, Lease: now.Add(s.leaseOf(route)).UnixMilli()}
		data, err := json.Marshal(next)
		if err != nil {
			return err
		}
		rev, err := kv.Update(ctx, key, data, 0)
		switch {
		case err == nil:
			s.mu.Lock()
			c.rev, c.rec = rev, next
			s.mu.Unlock()
			return nil
		case !errors.Is(err, natsjs.ErrKeyRevisionMismatch):
			return fmt.Errorf("cluster: write delivery lease: %w", err)
		}
	}
	cur, rev, found, err := s.get(ctx, key)
	if err != nil {
		return err
	}
	if !claimable(cur, found, s.cfg.Owner, now) {
		return errLeased
	}
	next := cur
	next.Owner, next.Lease = s.cfg.Owner, now.Add(s.leaseOf(route)).UnixMilli()
	data, err := json.Marshal(next)
	if err != nil {
		return err
	}
	if found {
		rev, err = kv.Update(ctx, key, data, rev)
	} else {
		rev, err = kv.Create(ctx, key, data)
	}
	switch {
	case errors.Is(err, natsjs.ErrKeyExists), errors.Is(err, natsjs.ErrKeyRevisionMismatch):
		return errLeased // another claimed it first
	case err != nil:
		return fmt.Errorf("cluster: write delivery lease: %w", err)
	}
	s.mu.Lock()
	c.rev, c.rec = rev, next
	s.mu.Unlock()
	return nil
}

// Claim waits for the claim of k; false if ctx ends first.
func (s *DeliveryState) Claim(ctx context.Context, k outbound.DeliveryKey) bool {
	t := time.NewTicker(claimPoll)
	defer t.Stop()
	for {
		if s.TryClaim(ctx, k) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// Release ends a claim: the lease is cleared by compare-and-set, unless
// the round's outcome already cleared it; an outcome Record could not
// write is written with it, and, while the bucket does not answer, tried
// again in the background until the lease ends or Stop (the claim held
// meanwhile: no round of it runs here, and it reads as its outcome). A
// release without an outcome that cannot be written leaves the lease to
// end by itself.
func (s *DeliveryState) Release(k outbound.DeliveryKey) {
	key := DeliveryKey(k.Route, k.Source, k.EventID)
	s.mu.Lock()
	c := s.held[key]
	var rev uint64
	var next record
	var unsent *unsentRound
	var unreset, outcome bool
	var until time.Time
	if c != nil && !c.recorded {
		rev, next, unsent, unreset, outcome, until = c.rev, c.rec, c.unsent, c.unreset, c.outcome, c.until
	}
	if !outcome {
		delete(s.held, key)
	}
	s.mu.Unlock()
	if rev == 0 {
		return
	}
	next.Owner, next.Lease = "", 0
	// The put-back of an Unreset is this process's write as an outcome
	// is: met again after its answer was lost, it stands and is recorded.
	nrev, err := s.release(context.Background(), key, next, rev, outcome || unreset)
	if releaseAgain(err, outcome, s.now(), until) {
		s.mu.Lock()
		stopped := s.stopped
		if !stopped {
			s.later.Add(1)
		}
		s.mu.Unlock()
		if !stopped {
			s.log.Warn("cannot write a delivery round's outcome yet; trying again while its lease holds", "route", k.Route,
				"source", k.Source, "event_id", k.EventID, "err", err)
			go s.releaseLater(k, key, next, rev, unsent, until)
			return
		}
		err = fmt.Errorf("%w (the delivery state is stopped)", err)
	}
	if err == nil && unreset && s.cfg.Replica != nil {
		// The state put back is the cluster's now: its record goes to the
		// other gateways, which applied the reset's.
		s.recordState(context.Background(), k, next, nrev)
	}
	s.released(k, key, outcome, nrev, err, unsent)
}

// releaseAgain decides whether a release that failed with err is tried
// again: only one that writes a round's outcome (an outcome lost would
// have the delivery run again), while the round's lease holds (past it,
// another gateway may run the round), and not when the entry was written
// by another (fenced: the outcome is not the cluster's).
func releaseAgain(err error, outcome bool, now, until time.Time) bool {
	return err != nil && outcome && now.Before(until) && !errors.Is(err, ErrFenced)
}

// releaseLater tries the release of an outcome again, with backoff, until
// it is written or releaseAgain says no more; at Stop it makes one last
// try, of at most lastTryWait.
func (s *DeliveryState) releaseLater(k outbound.DeliveryKey, key string, next record, rev uint64, unsent *unsentRound, until time.Time) {
	defer s.later.Done()
	wait := claimPoll
	for sleep(s.bg, wait) {
		wait = min(2*wait, 4*time.Second)
		nrev, err := s.release(s.bg, key, next, rev, true)
		if !releaseAgain(err, true, s.now(), until) {
			s.released(k, key, true, nrev, err, unsent)
			return
		}
	}
	// Its own second, the shutdown's context perhaps spent by the drain.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.shutdown), lastTryWait)
	defer cancel()
	nrev, err := s.release(ctx, key, next, rev, true)
	if err != nil {
		err = fmt.Errorf("%w (the delivery state stopped)", err)
	}
	s.released(k, key, true, nrev, err, unsent)
}

// lastTryWait bounds the last try of an outcome at Stop.
const lastTryWait = time.Second

// Stop ends the background tries of outcomes not yet written (Release),
// each with one last try within ctx, and waits for them; an outcome then
// not written is logged as given up. Call it once no round runs (after
// the engine stops) and before the broker and the store close. Safe to
// call twice.
func (s *DeliveryState) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil
	}
	s.stopped, s.shutdown = true, ctx
	s.mu.Unlock()
	s.bgStop()
	s.later.Wait()
	return nil
}

// released ends a release written at revision rev (err nil) or given up:
// a held outcome's claim is let go, and an unsent round, now the
// cluster's, is recorded with its record for the other gateways.
func (s *DeliveryState) released(k outbound.DeliveryKey, key string, outcome bool, rev uint64, err error, unsent *unsentRound) {
	if outcome {
		s.mu.Lock()
		delete(s.held, key)
		s.mu.Unlock()
	}
	if err == nil && unsent != nil {
		// The outcome is the cluster's now: its record goes to the other
		// gateways (the round is written again, the same, with it).
		unsent.c.Version = rev
		if err := s.cfg.Replica.RecordClusterRound(context.Background(), &unsent.d, unsent.attempts, unsent.c); err != nil {
			s.log.Warn("cannot record a delivery round's record; the other gateways miss it", "route", k.Route,
				"source", k.Source, "event_id", k.EventID, "err", err)
		} else if s.cfg.OnRecorded != nil {
			s.cfg.OnRecorded()
		}
	}
	switch {
	case err != nil && outcome:
		s.log.Warn("cannot write a delivery round's outcome; given up, the delivery may be sent again", "route", k.Route,
			"source", k.Source, "event_id", k.EventID, "err", err)
	case err != nil:
		s.log.Warn("cannot release a delivery lease; it ends by itself", "route", k.Route,
			"source", k.Source, "event_id", k.EventID, "err", err)
	}
}

// release writes next (the lease cleared) over revision rev, trying again
// within Wait (and ctx) while the bucket does not answer (a leader just
// elected).
// With mine, a revision mismatch whose entry (read past rev) is next is
// this process's own earlier write, committed after its answer was lost:
// it stands.
func (s *DeliveryState) release(ctx context.Context, key string, next record, rev uint64, mine bool) (uint64, error) {
	data, err := json.Marshal(next)
	if err != nil {
		return 0, err
	}
	deadline := s.now().Add(s.cfg.Wait)
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Wait)
	defer cancel()
	for {
		var kv natsjs.KeyValue
		var nrev uint64
		if kv, err = s.bucket(ctx); err == nil {
			nrev, err = kv.Update(ctx, key, data, rev)
			if errors.Is(err, natsjs.ErrKeyRevisionMismatch) {
				if !mine {
					return 0, err
				}
				return s.ownWrite(ctx, key, next, rev, deadline)
			}
		}
		if err == nil {
			return nrev, nil
		}
		if !sleep(ctx, claimPoll) {
			return 0, err
		}
	}
}

// Reset writes an operator's reset of k to pending in the bucket, by
// compare-and-set over the entry as read, before the retry or replay is
// answered (outbound's stateResetter): if this gateway stops before the
// operator's round claims k, the round of the event put back in its
// outbox at its next start, on whichever gateway, finds k pending, not in
// the state before the reset. No entry, or one with no round recorded
// (and no lease running), needs nothing (Status is then the local
// store's). A lease is never
// written over: while a round of k runs (here or under another gateway's
// unexpired lease) nothing is written and the reset is refused
// (outbound.ErrRoundQueued), so that the round's outcome is written over
// its own claim's revision as ever. A retry (resend false) of a delivery
// the cluster holds succeeded is outbound.ErrSucceeded. undo writes back
// the entry as it was, over the reset's revision only. rec is the reset
// as written, with its revision, for the local reset to record (with
// Replica; else nil, as when nothing was written).
func (s *DeliveryState) Reset(ctx context.Context, k outbound.DeliveryKey, resend bool) (rec *store.StateRecord, undo func(), err error) {
	key := DeliveryKey(k.Route, k.Source, k.EventID)
	s.mu.Lock()
	_, busy := s.held[key]
	s.mu.Unlock()
	if busy {
		return nil, nil, fmt.Errorf("%w: a round of it runs on this gateway", outbound.ErrRoundQueued)
	}
	kv, err := s.bucket(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Wait)
	defer cancel()
	for {
		cur, rev, found, err := s.get(ctx, key)
		switch {
		case err != nil:
			return nil, nil, fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		case !found:
			return nil, nil, nil
		case !claimable(cur, true, s.cfg.Owner, s.now()):
			return nil, nil, fmt.Errorf("%w: a round of it runs under the lease of %s", outbound.ErrRoundQueued, cur.Owner)
		case cur.State == "":
			return nil, nil, nil
		case cur.State == store.StateSucceeded && !resend:
			return nil, nil, outbound.ErrSucceeded
		case cur.State == store.StatePending:
			return nil, nil, nil
		}
		next := cur
		next.State, next.Owner, next.Lease = store.StatePending, "", 0
		data, err := json.Marshal(next)
		if err != nil {
			return nil, nil, err
		}
		nrev, err := kv.Update(ctx, key, data, rev)
		switch {
		case err == nil:
			if s.cfg.Replica != nil {
				rec = s.stateRecord(k, next, nrev)
			}
			return rec, func() { s.unreset(key, cur, nrev) }, nil
		case !errors.Is(err, natsjs.ErrKeyRevisionMismatch):
			return nil, nil, fmt.Errorf("%w: cluster: write a delivery's reset: %w", store.ErrUnavailable, err)
		}
		// Written meanwhile: read again.
	}
}

// stateRecord is the record of k's entry e as written at revision rev
// (the store completes it from the delivery's row).
func (s *DeliveryState) stateRecord(k outbound.DeliveryKey, e record, rev uint64) *store.StateRecord {
	return &store.StateRecord{Origin: s.cfg.Origin, Route: k.Route, Source: k.Source, EventID: k.EventID,
		State: e.State, Attempts: e.Attempts, Rounds: e.Rounds, LastStatus: e.Status, NextAttemptAt: e.Next,
		Version: rev}
}

// recordState records k's entry e, written at revision rev by no round,
// in the local store with its record for the other gateways.
func (s *DeliveryState) recordState(ctx context.Context, k outbound.DeliveryKey, e record, rev uint64) {
	if err := s.cfg.Replica.RecordClusterState(ctx, s.stateRecord(k, e, rev)); err != nil {
		s.log.Warn("cannot record a delivery's state; the other gateways miss it until its next round", "route", k.Route,
			"source", k.Source, "event_id", k.EventID, "state", e.State, "err", err)
		return
	}
	if s.cfg.OnRecorded != nil {
		s.cfg.OnRecorded()
	}
}

// Recorded tells the records' publisher that a reset's record was written
// with the local reset.
func (s *DeliveryState) Recorded() {
	if s.cfg.OnRecorded != nil {
		s.cfg.OnRecorded()
	}
}

// unreset writes prev back over the reset's revision rev; anything
// written since (the operator's round's claim) stands.
func (s *DeliveryState) unreset(key string, prev record, rev uint64) {
	prev.Owner, prev.Lease = "", 0
	data, err := json.Marshal(prev)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Wait)
		defer cancel()
		var kv natsjs.KeyValue
		if kv, err = s.bucket(ctx); err == nil {
			_, err = kv.Update(ctx, key, data, rev)
		}
	}
	if err != nil && !errors.Is(err, natsjs.ErrKeyRevisionMismatch) {
		s.log.Warn("cannot undo a delivery's reset to pending in the cluster", "key", key, "err", err)
	}
}

// Unreset, while this process holds k's claim and no outcome was
// written under it, makes the claim's release write state in place of a
// reset's pending: the operator's round ran nothing (its route paused
// while it waited).
func (s *DeliveryState) Unreset(k outbound.DeliveryKey, state string) {
	key := DeliveryKey(k.Route, k.Source, k.EventID)
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.held[key]; c != nil && c.rev != 0 && !c.recorded && c.rec.State == store.StatePending {
		c.rec.State, c.unreset = state, true
	}
}

// Status is where the cluster says the delivery stands, with this store's
// delivery ID: the entry as claimed if this process holds the claim, else
// as read. With no round recorded in the cluster, it is the local record
// (store.ErrNotFound if none). store.ErrOtherEvent comes from the local
// store (seq is not the event's here).
func (s *DeliveryState) Status(ctx context.Context, route string, seq int64, source, eventID string) (store.DeliveryStatus, error) {
	local, lerr := s.local.DeliveryStatus(ctx, route, seq, source, eventID)
	if lerr != nil && !errors.Is(lerr, store.ErrNotFound) {
		return local, lerr
	}
	key := DeliveryKey(route, source, eventID)
	s.mu.Lock()
	c := s.held[key]
	held := c != nil && c.rev != 0
	var rec record
	var rev uint64
	if held {
		rec, rev = c.rec, c.rev
	}
	s.mu.Unlock()
	if !held {
		_, err := s.bucket(ctx)
		if err == nil {
			rctx, cancel := context.WithTimeout(ctx, s.cfg.Wait)
			rec, _, _, err = s.get(rctx, key)
			cancel()
		}
		if err != nil {
			return store.DeliveryStatus{}, fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		}
	}
	if rec.State == "" {
		if held && lerr == nil && local.Attempts > rec.Attempts {
			// No round in the cluster for a delivery this store has rounds
			// of (the bucket made anew, or its entry past its ttl): the
			// round's count goes on from the store's, so its attempts keep
			// their numbers.
			s.mu.Lock()
			c.rec.Attempts, c.rec.Rounds = local.Attempts, local.Rounds
			s.mu.Unlock()
		}
		return local, lerr
	}
	if held && s.cfg.Replica != nil && orphaned(rec, local, lerr) {
		id, err := s.recordOrphan(ctx, route, seq, source, eventID, rec, rev)
		if err != nil {
			return store.DeliveryStatus{}, fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		}
		local.ID = id
	}
	return rec.status(local.ID), nil
}

// orphaned reports whether the cluster holds a final outcome of more
// attempts than this store has recorded (local, or lerr
// store.ErrNotFound). Only the attempts tell: an operator's retry or
// replay sets the local state to pending before its round, and a local
// success stays one.
func orphaned(rec record, local store.DeliveryStatus, lerr error) bool {
	if !(&store.DeliveryStatus{State: rec.State}).Terminal() {
		return false
	}
	return errors.Is(lerr, store.ErrNotFound) || local.Attempts < rec.Attempts
}

// recordOrphan records here, with its record for the other gateways, a
// final outcome the cluster holds that no gateway may have recorded: the
// gateway of its round wrote it to the bucket and stopped before its own
// commit (a SIGKILL between the two). The round's attempts died with that
// gateway; their count and the last status are the bucket's. Its version
// is the claim's revision, past the outcome's, so the record is applied
// over what the others have; a record of the same round that does come
// later still adds its attempts. It returns the delivery's ID here.
func (s *DeliveryState) recordOrphan(ctx context.Context, route string, seq int64, source, eventID string, rec record, rev uint64) (int64, error) {
	d := &store.Delivery{EventSeq: seq, Route: route, Source: source, EventID: eventID,
		IdempotencyKey: outbound.IdempotencyKey(route, source, eventID), State: rec.State, Rounds: rec.Rounds,
		LastStatus: rec.Status}
	c := store.ClusterRound{Origin: s.cfg.Origin, FirstAttempt: rec.Attempts + 1, Attempts: rec.Attempts, Version: rev,
		Outcome: true}
	if err := s.cfg.Replica.RecordClusterRound(ctx, d, nil, c); err != nil {
		return 0, fmt.Errorf("cluster: record an outcome its round's gateway did not: %w", err)
	}
	s.log.Info("recorded a delivery outcome the cluster held and no record carried (its round's gateway stopped before recording it)",
		"route", route, "source", source, "event_id", eventID, "state", rec.State)
	if s.cfg.OnRecorded != nil {
		s.cfg.OnRecorded()
	}
	return d.ID, nil
}

// Record writes a round's outcome over the claim by compare-and-set on
// the claim's revision, trying again within Wait while the bucket cannot
// be reached, and records the round in the local store in any case. If
// the lease was taken over (ErrFenced) or the entry could not be written,
// it returns the error: the message comes back and reads the cluster's
// state. d.Attempts is set to the attempts of the whole cluster.
func (s *DeliveryState) Record(ctx context.Context, d *store.Delivery, attempts []store.Attempt) error {
	key := DeliveryKey(d.Route, d.Source, d.EventID)
	s.mu.Lock()
	c := s.held[key]
	var claimed record
	var rev uint64
	if c != nil {
		claimed, rev = c.rec, c.rev
	}
	s.mu.Unlock()
	if rev == 0 {
		return errors.New("cluster: record delivery round: no claim held")
	}
	next := after(claimed, d, len(attempts))
	rev, kerr := s.write(ctx, key, next, rev)
	var lerr error
	var unsent *unsentRound
	if s.cfg.Replica != nil {
		cr := store.ClusterRound{Origin: s.cfg.Origin, FirstAttempt: claimed.Attempts + 1, Attempts: next.Attempts}
		if kerr == nil {
			cr.Version = rev // else no record yet: the round is not the cluster's (see Release)
		}
		lerr = s.cfg.Replica.RecordClusterRound(ctx, d, attempts, cr)
		switch {
		case lerr == nil && cr.Version > 0 && s.cfg.OnRecorded != nil:
			s.cfg.OnRecorded()
		case lerr == nil && kerr != nil && !errors.Is(kerr, ErrFenced):
			unsent = &unsentRound{d: *d, attempts: copyAttempts(attempts), c: cr}
		}
	} else {
		lerr = s.local.RecordRound(ctx, d, attempts)
	}
	s.mu.Lock()
	switch {
	case kerr == nil:
		c.rev, c.rec, c.recorded = rev, next, true
	case errors.Is(kerr, ErrFenced):
		c.recorded = true // the lease is another's: nothing to release
	default:
		c.rec, c.unsent, c.outcome, c.until = next, unsent, true, time.UnixMilli(claimed.Lease) // Release writes the outcome
	}
	s.mu.Unlock()
	if kerr != nil {
		return kerr
	}
	if lerr != nil {
		return lerr
	}
	d.Attempts = next.Attempts
	return nil
}

// copyAttempts copies attempts, their responses included (kept past the
// round).
func copyAttempts(attempts []store.Attempt) []store.Attempt {
	out := make([]store.Attempt, len(attempts))
	for i, a := range attempts {
		a.Response = append([]byte(nil), a.Response...)
		out[i] = a
	}
	return out
}

// write updates key to rec over revision rev, trying again for Wait while
// the bucket cannot be reached. A revision mismatch after a try that
// failed without an answer may be that try's own write, committed: an
// entry past rev that is rec stands as this write (as in release).
func (s *DeliveryState) write(ctx context.Context, key string, rec record, rev uint64) (uint64, error) {
	data, err := json.Marshal(rec)
	if err != nil {
		return 0, err
	}
	deadline := s.now().Add(s.cfg.Wait)
	unanswered := false
	for {
		wctx, cancel := context.WithTimeout(ctx, s.cfg.Wait)
		var kv natsjs.KeyValue
		var next uint64
		if kv, err = s.bucket(wctx); err == nil {
			next, err = kv.Update(wctx, key, data, rev)
		}
		cancel()
		switch {
		case err == nil:
			return next, nil
		case errors.Is(err, natsjs.ErrKeyRevisionMismatch):
			if unanswered {
				return s.ownWrite(ctx, key, rec, rev, deadline)
			}
			return 0, ErrFenced
		case s.now().After(deadline) || !sleep(ctx, claimPoll):
			return 0, fmt.Errorf("cluster: write delivery state: %w", err)
		}
		unanswered = true
	}
}

// ownWrite tells, after a try without an answer (write), or of an outcome
// whose write's answer was lost (release, mine), whether key's entry past
// rev is rec (that write, committed: its revision) or another's
// (ErrFenced). A read may come from a replica behind the leader, so one
// that is not past rev is made again until deadline; then the error says
// neither.
func (s *DeliveryState) ownWrite(ctx context.Context, key string, rec record, rev uint64, deadline time.Time) (uint64, error) {
	for {
		cur, crev, found, err := s.get(ctx, key)
		if err == nil && found && crev > rev {
			if cur == rec {
				return crev, nil
			}
			return 0, ErrFenced
		}
		if s.now().After(deadline) || !sleep(ctx, claimPoll) {
			// Not known whose: the round stays to be written at its
			// release (release, mine), which tells.
			return 0, fmt.Errorf("cluster: write delivery state: the entry's writer cannot be told yet: %w", natsjs.ErrKeyRevisionMismatch)
		}
	}
}

// ClaimsByIdentity: a claim is of the KV key, which has no seq in it.
func (s *DeliveryState) ClaimsByIdentity() {}

var _ outbound.DeliveryState = (*DeliveryState)(nil)

// DeliveryState writes operators' resets (outbound's stateResetter).
var _ interface {
	Reset(ctx context.Context, k outbound.DeliveryKey, resend bool) (*store.StateRecord, func(), error)
	Unreset(k outbound.DeliveryKey, state string)
	Recorded()
} = (*DeliveryState)(nil)
