// Package outbound delivers accepted events to the configured routes.
//
// Each route has a durable JetStream pull consumer on the subjects of its
// sources. A message is delivered in rounds: a round is a few quick
// in-process retries (go-retryablehttp, jittered backoff, Retry-After
// honoured but capped); a failed round is recorded and the message handed
// back to JetStream with NakWithDelay for the next step of the long
// schedule; after the last step the delivery is dead. The outcome of every
// round is committed to the store before the message is acked or nak'd, so
// a crash only ever means a redelivery, and every request for one (route,
// event) carries the same Idempotency-Key.
//
// A message goes pull (fetch as many as there are free workers) → handle →
// process (read the event, claim its round, read its delivery) → admit
// (is a round due?) → the breaker → round (send, decide, record, report)
// → settle, the one place a message is acked, nak'd, terminated or handed
// back. admit and decide are pure (decide.go); where a delivery stands is
// the DeliveryState, by default the store with claims in this process.
package outbound

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/jetstream"
	"github.com/hookgate/hookgate/store"
)

// Store is what the engine is built on: the store's parts that each piece
// of the engine uses, declared where it uses them.
type Store interface {
	StatusRecorder // the default DeliveryState
	eventAdopter   // a message whose Hookgate-Seq is not its event's here
	retryStore     // Retry
	replayStore    // Replay
	recoverStore   // Recover
	taskScoper     // tasks' rounds per token (Tasks.PerToken)
}

// eventAdopter stores the event of a message from elsewhere.
type eventAdopter interface {
	AdoptEvent(ctx context.Context, ev *store.Event, streamSeq int64) (seq int64, stored bool, err error)
}

// retryStore is what an operator's retry reads and resets.
type retryStore interface {
	DeliveryByUID(ctx context.Context, uid string) (*store.Delivery, error)
	EventBySeq(ctx context.Context, seq int64) (*store.Event, error)
	SetDeliveryState(ctx context.Context, id int64, state string) (bool, error)
	SetClusterDeliveryState(ctx context.Context, id int64, state string, rec *store.StateRecord) (bool, error)
}

// recoverStore is what Recover reads and requeues.
type recoverStore interface {
	PublishedSince(ctx context.Context, minStreamSeq int64, routes map[string]store.RouteTakes, fn func(ev *store.Event, deliveries map[string]bool) error) error
	PendingDeliveries(ctx context.Context, fn func(seq int64, route, source, eventType string, reset bool) error) error
	Requeue(ctx context.Context, seqs, anew []int64) error
	Meta(ctx context.Context, key string) (string, error)
	MetaKeys(ctx context.Context, prefix string) ([]string, error)
	SetMeta(ctx context.Context, key, value string) error
	HasOwnEvents(ctx context.Context) (bool, error)
}

// Config tunes the engine; zero values take the stated defaults.
type Config struct {
	// AckWait is how long JetStream waits for an ack before redelivering;
	// a long round keeps its message with progress signals. Default 10s.
	AckWait time.Duration
	// UserAgent is sent with every request. Default "hookgate/dev".
	UserAgent string
	// Transport is the HTTP transport of every route; an *http.Transport
	// is cloned for each, so each route has its own pool. Default: a
	// pooled transport without environment proxies.
	Transport http.RoundTripper
	// Metrics, if set, counts deliveries.
	Metrics *Metrics
	// Tasks, if set, adds the task route (TaskRoute), whose requests go
	// through TaskTransport (the egress policy's).
	Tasks         *Tasks
	TaskTransport http.RoundTripper
	// State, if set, is where deliveries stand (cluster mode). Default:
	// the store, with claims held in this process.
	State DeliveryState
	// Alerts, if set, hears of breakers opening and closing and of
	// deliveries recorded dead here. Its methods must not block.
	Alerts Alerts
	// Pauses, if set, shares operators' pauses between the gateways
	// (cluster mode): Pause and Resume are recorded there, which applies
	// them here (ApplyPause) and on every gateway. Default: this
	// gateway's store alone.
	Pauses Pauses
	// Takes, if set, shares what each gateway's routes take (cluster
	// mode): a message a route here does not take is held while another
	// gateway's route takes it (a rolling change). Default: acked.
	Takes RouteTakes
}

// Alerts is told what an operator should hear of (package alert).
type Alerts interface {
	BreakerOpened(route string, failures int, until time.Time)
	// BreakerClosed: a probe succeeded, or an operator resumed the route.
	BreakerClosed(route string, resumed bool)
	Dead(route string)
}

// Engine runs the consumers of every route.
type Engine struct {
	cfg    Config
	routes []*route
	byName map[string]*route
	state  DeliveryState
	events eventAdopter
	retrys retryStore
	replay replayStore
	store  recoverStore
	scopes taskScoper
	broker *jetstream.Broker
	log    *slog.Logger

	// pauseMu makes the cluster's pauses (ApplyPause) and the store's
	// copies read at start (loadPauses) apply one at a time: each reads
	// the store's copy and sets the breaker together.
	pauseMu sync.Mutex

	// sinceMu makes loadSince run once, by Start or by the relay's
	// recovery (Owed), which runs before Start.
	sinceMu     sync.Mutex
	sinceLoaded bool
	// backOwed: the routes configured again whose events the last Owed
	// gave (Requeued).
	backOwed []string

	mu       sync.Mutex
	cancel   context.CancelFunc // stops pulling
	abort    context.CancelFunc // cancels rounds in flight
	roundCtx context.Context    // rounds run in it until abort
	pullers  sync.WaitGroup
	inflight sync.WaitGroup
	started  bool
	// manual holds the deliveries with an operator's round (a retry or
	// a replay) queued or running: one each, MaxManualRounds in all (of
	// tasks, also counted in the task route's queued).
	manual map[DeliveryKey]bool
}

// MaxManualRounds is the most operators' rounds (retries and replays)
// queued or running at once; past it they are refused with ErrBusy.
const MaxManualRounds = 1024

// New builds the engine for the configured routes.
func New(routes []Route, st Store, b *jetstream.Broker, cfg Config, log *slog.Logger) (*Engine, error) {
	if cfg.AckWait <= 0 {
		cfg.AckWait = 10 * time.Second
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "hookgate/dev"
	}
	if cfg.Transport == nil {
		cfg.Transport = defaultTransport()
	}
	if cfg.State == nil && st != nil {
		cfg.State = newLocalState(st)
	}
	e := &Engine{cfg: cfg, state: cfg.State, events: st, retrys: st, replay: st, store: st, scopes: st, broker: b, log: log,
		byName: map[string]*route{}}
	stream := jetstream.DefaultStream
	if b != nil {
		stream = b.Stream()
	}
	for _, rc := range routes {
		r, err := newRoute(rc, stream, cfg.Transport)
		if err != nil {
			return nil, err
		}
		e.routes = append(e.routes, r)
		e.byName[rc.Name] = r
	}
	if cfg.Tasks != nil {
		r, err := newTaskRoute(*cfg.Tasks, stream, cfg.TaskTransport)
		if err != nil {
			return nil, err
		}
		e.routes = append(e.routes, r)
		e.byName[TaskRoute] = r
	}
	for _, r := range e.routes {
		r.retry = e.httpClient(r)
		r.breaker.alerts, r.breaker.name = cfg.Alerts, r.cfg.Name
	}
	return e, nil
}

func defaultTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		// A downstream's headers, as a task's (egress.Policy.Transport):
		// net/http would read 10 MiB.
		MaxResponseHeaderBytes: 1 << 20,
	}
}

// Start starts pulling for every route. Each route's consumer is created or
// updated as soon as JetStream answers (at once, unless an external NATS is
// down).
func (e *Engine) Start(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started {
		return nil
	}
	if err := e.loadPauses(ctx); err != nil {
		return err
	}
	if err := e.loadSince(ctx); err != nil {
		return err
	}
	e.AnnounceTakes(ctx)
	pullCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	roundCtx, abort := context.WithCancel(context.WithoutCancel(ctx))
	e.cancel, e.abort, e.roundCtx = cancel, abort, roundCtx
	for _, r := range e.routes {
		e.pullers.Add(1)
		go e.pull(pullCtx, roundCtx, r)
	}
	e.started = true
	return nil
}

// ConsumerSet declares every route's durable consumer, and the names of
// the consumers the routes own: the broker creates them with the stream
// (jetstream.Broker.EnsureTopology) and deletes those of routes no longer
// configured (they would keep messages in an interest stream), once the
// store recorded that those routes take nothing from now on (loadSince).
func (e *Engine) ConsumerSet() jetstream.ConsumerSet {
	set := jetstream.ConsumerSet{Owned: []string{"route_*", "tasks"}, Removing: e.loadSince}
	for _, r := range e.routes {
		set.Consumers = append(set.Consumers, e.consumerConfig(r))
	}
	return set
}

// consumerConfig is the durable consumer of route r.
func (e *Engine) consumerConfig(r *route) natsjs.ConsumerConfig {
	return natsjs.ConsumerConfig{
		Durable:        r.consumer,
		Description:    "hookgate route " + r.cfg.Name,
		FilterSubjects: r.subjects,
		AckPolicy:      natsjs.AckExplicitPolicy,
		AckWait:        e.cfg.AckWait,
		MaxDeliver:     -1,
		// Unlimited: a message waiting for its next round (nak'd with the
		// schedule's delay, for up to days) is pending an ack, and a
		// limit would stop new messages once that many wait. The puller
		// fetches only for its free workers.
		MaxAckPending: -1,
		DeliverPolicy: natsjs.DeliverAllPolicy,
	}
}

func (e *Engine) ensureConsumer(ctx context.Context, r *route) (natsjs.Consumer, error) {
	return e.broker.EnsureConsumer(ctx, e.consumerConfig(r))
}

// Stop stops pulling and waits for rounds in flight until ctx ends; then it
// cancels them, and their messages are handed back for redelivery. It
// returns nil (a round cut short is handed back, not lost). Safe to call
// twice, and before or without Start.
func (e *Engine) Stop(ctx context.Context) error {
	e.mu.Lock()
	cancel, abort := e.cancel, e.abort
	e.cancel, e.abort = nil, nil
	e.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	e.pullers.Wait()
	done := make(chan struct{})
	go func() { e.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		abort()
		<-done
	}
	abort()
	return nil
}

// envelope is an event as a route delivers it.
type envelope struct {
	seq                          int64 // the event's intake sequence: its deliveries' key
	source, id, typ, contentType string
	body                         []byte
	// A task's own request line and headers; empty for webhooks.
	url, method string
	headers     map[string]string
	// idempotencyKey is a task's own Idempotency-Key, sent in place of
	// the derived one; "" sends the derived one.
	idempotencyKey string
}

// key is ev's delivery on r.
func (ev *envelope) key(r *route) DeliveryKey {
	return DeliveryKey{Route: r.cfg.Name, Seq: ev.seq, Source: ev.source, EventID: ev.id}
}

// envelopeOf reads an event from a stored event or a message's parts. ok
// is false for a task whose body is not a task request.
func envelopeOf(seq int64, source, id, typ, contentType string, body []byte) (envelope, bool) {
	if source == store.TaskSource {
		return taskEnvelope(seq, id, body)
	}
	return envelope{seq: seq, source: source, id: id, typ: typ, contentType: contentType, body: body}, true
}

// Retry runs a round of a delivery now, in the background, with the same
// Idempotency-Key: for an operator retrying a dead or retrying delivery.
// A delivery that succeeded is not sent again (ErrSucceeded); one with an
// operator's round queued already is not queued twice (ErrRoundQueued);
// one of a paused route is not sent (ErrRoutePaused). In cluster mode the
// reset to pending is the cluster's before Retry returns (a round of the
// delivery running under its lease is ErrRoundQueued, one the cluster
// holds succeeded ErrSucceeded).
// id is the delivery's API ID (store.DeliveryUID).
func (e *Engine) Retry(ctx context.Context, id string) (*store.Delivery, error) {
	return e.retry(ctx, id, false, nil)
}

// RetryForTaskClient is Retry asked by a task client (of its own task's
// delivery): at most the task route's per-token slots of its scope are
// queued at once (ErrBusy), so its retries take no more room than its
// tasks' rounds. An operator's retries wait for the slots, not in line.
func (e *Engine) RetryForTaskClient(ctx context.Context, id string) (*store.Delivery, error) {
	return e.retry(ctx, id, true, nil)
}

// retry is Retry (client: RetryForTaskClient); done, when not nil, is
// called once the round is over (only when retry returns nil).
func (e *Engine) retry(ctx context.Context, id string, client bool, done func()) (*store.Delivery, error) {
	d, err := e.retrys.DeliveryByUID(ctx, id)
	if err != nil {
		return nil, err
	}
	if d.State == store.StateSucceeded {
		return d, ErrSucceeded
	}
	r := e.byName[d.Route]
	if r == nil {
		return d, fmt.Errorf("%w: %q", ErrUnknownRoute, d.Route)
	}
	if r.breaker.state() == RoutePaused {
		return d, fmt.Errorf("%w: %s", ErrRoutePaused, d.Route)
	}
	ev, err := e.retrys.EventBySeq(ctx, d.EventSeq)
	if err != nil {
		return d, err
	}
	env, err := identity(ev)
	if err != nil {
		return d, err
	}
	scope := e.manualScope(ctx, r, env)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.abort == nil {
		return d, ErrNotRunning
	}
	if err := e.manualRoom(r, env.key(r), scope, client); err != nil {
		return d, err
	}
	orig := store.DeliveryStatus{ID: d.ID, State: d.State, Attempts: d.Attempts, Rounds: d.Rounds,
		NextAttemptAt: d.NextAttemptAt}
	recs, undo, err := e.resetShared(ctx, []DeliveryKey{env.key(r)}, false)
	if err != nil {
		return d, err
	}
	if _, err := e.retrys.SetClusterDeliveryState(ctx, d.ID, store.StatePending, recs[0]); err != nil {
		undo()
		return d, err
	}
	e.recorded(recs)
	d.State = store.StatePending
	e.startManual(r, env, scope, orig, false, done)
	return d, nil
}

// resetShared writes an operator's reset of keys to pending in a shared
// delivery state (cluster mode; see stateResetter), all or none: undo puts
// back those written (a local reset that failed after them), and recs
// (one per key, nil where none) are their records, for the local resets.
func (e *Engine) resetShared(ctx context.Context, keys []DeliveryKey, resend bool) (recs []*store.StateRecord, undo func(), err error) {
	recs = make([]*store.StateRecord, len(keys))
	rs, ok := e.state.(stateResetter)
	if !ok {
		return recs, func() {}, nil
	}
	var undos []func()
	undo = func() {
		for _, u := range undos {
			u()
		}
	}
	for i, k := range keys {
		rec, u, err := rs.Reset(ctx, k, resend)
		if err != nil {
			undo()
			return nil, nil, err
		}
		recs[i] = rec
		if u != nil {
			undos = append(undos, u)
		}
	}
	return recs, undo, nil
}

// recorded tells a shared delivery state that the records recs were
// written with the local resets.
func (e *Engine) recorded(recs []*store.StateRecord) {
	rs, ok := e.state.(stateResetter)
	if !ok {
		return
	}
	for _, rec := range recs {
		if rec != nil {
			rs.Recorded()
			return
		}
	}
}

// manualScope is the token scope that submitted ev if r is the task
// route ("" if unknown here: in cluster mode, before the task's record
// came); "" on other routes.
func (e *Engine) manualScope(ctx context.Context, r *route, ev envelope) string {
	if r.scopes == nil {
		return ""
	}
	scope, err := e.scopes.TaskScope(ctx, ev.id)
	if err != nil {
		return ""
	}
	return scope
}

// identity is ev without its body, or an error if ev cannot be delivered:
// what an operator's round holds while it waits (manualRound reads the
// event again once it runs).
func identity(ev *store.Event) (envelope, error) {
	if _, ok := envelopeOf(ev.Seq, ev.Source, ev.ID, ev.Type, ev.ContentType, ev.Body); !ok {
		return envelope{}, fmt.Errorf("event %s/%s is not deliverable", ev.Source, ev.ID)
	}
	return envelope{seq: ev.Seq, source: ev.Source, id: ev.ID, typ: ev.Type}, nil
}

// manualRoom is nil if an operator's round of k may be queued: none is
// for k already (ErrRoundQueued), fewer than MaxManualRounds in all, and
// for a task client (client) fewer than the task route's per-token slots
// of its scope (ErrBusy: its retries cannot take more room than its
// tasks' rounds). Called with e.mu held.
func (e *Engine) manualRoom(r *route, k DeliveryKey, scope string, client bool) error {
	switch {
	case e.manual[k]:
		return ErrRoundQueued
	case len(e.manual) >= MaxManualRounds:
		return ErrBusy
	case client && r.queued != nil && r.queued.full(scope):
		return ErrBusy
	}
	return nil
}

// startManual queues an operator's round of ev on r (manualRound); done,
// when not nil, is called once it is over. scope is a task's token scope.
// Called with e.mu held, after manualRoom.
func (e *Engine) startManual(r *route, ev envelope, scope string, prev store.DeliveryStatus, resend bool, done func()) {
	k := ev.key(r)
	if e.manual == nil {
		e.manual = map[DeliveryKey]bool{}
	}
	e.manual[k] = true
	if r.queued != nil {
		r.queued.add(scope)
	}
	e.inflight.Add(1)
	go func() {
		defer e.inflight.Done()
		if done != nil {
			defer done()
		}
		defer func() {
			e.mu.Lock()
			delete(e.manual, k)
			e.mu.Unlock()
			if r.queued != nil {
				r.queued.give(scope)
			}
		}()
		e.manualRound(r, ev, scope, prev, resend)
	}()
}

// manualRound runs an operator's round once no other round of the event
// runs on r (waiting for it), unless the engine stops first. It reads the
// event (ev is its identity) once it runs. If a round was recorded while
// it waited, it goes on from that record; a retry (resend false) of a
// delivery that has now succeeded is not sent.
func (e *Engine) manualRound(r *route, id envelope, scope string, prev store.DeliveryStatus, resend bool) {
	if r.scopes != nil {
		// A task's round takes a slot of its token like any of its rounds.
		if !r.scopes.wait(e.roundCtx, scope) {
			return
		}
		defer r.scopes.give(scope)
	}
	k := id.key(r)
	if !e.state.Claim(e.roundCtx, k) {
		return
	}
	defer e.state.Release(k)
	stored, err := e.retrys.EventBySeq(e.roundCtx, id.seq)
	if err != nil {
		e.log.Warn("operator round skipped: event unavailable", "route", r.cfg.Name,
			"source", id.source, "event_id", id.id, "err", err)
		return
	}
	ev, ok := envelopeOf(stored.Seq, stored.Source, stored.ID, stored.Type, stored.ContentType, stored.Body)
	if !ok {
		return
	}
	cur, err := e.state.Status(e.roundCtx, r.cfg.Name, ev.seq, ev.source, ev.id)
	asked := prev
	prev, run := manualFrom(prev, cur, err, resend)
	if !run {
		// The retry's reset to pending is undone: to the success found,
		// or to the state it was asked on.
		if err != nil {
			e.log.Warn("operator retry skipped: delivery state unavailable", "route", r.cfg.Name,
				"source", ev.source, "event_id", ev.id, "err", err)
			e.putBack(r, k, ev, asked.ID, asked.State, true) // the cluster's too
		} else {
			e.putBack(r, k, ev, asked.ID, cur.State, false)
		}
		return
	}
	if r.breaker.state() == RoutePaused {
		// Paused while the round waited: nothing is sent, and the reset
		// to pending is undone, unless a round recorded since (a new
		// delivery stays pending).
		e.log.Info("operator round skipped: the route was paused meanwhile", "route", r.cfg.Name,
			"source", ev.source, "event_id", ev.id)
		if state := asked.State; err == nil && cur.State == store.StatePending && state != "" && state != store.StatePending {
			e.putBack(r, k, ev, asked.ID, state, true)
		}
		return
	}
	if filtered, _ := e.filtered(e.roundCtx, r, ev, prev); filtered {
		return
	}
	dec := e.round(e.roundCtx, r, ev, prev, true)
	if prev.State == "" && dec.record && dec.next.state == store.StateRetrying {
		e.publishAnew(r, ev)
	}
}

// putBack undoes an operator's reset to pending of delivery id (k) that
// ran no round: to state, here and, with shared, in a shared delivery
// state (written, with its record, at k's release).
func (e *Engine) putBack(r *route, k DeliveryKey, ev envelope, id int64, state string, shared bool) {
	if rs, ok := e.state.(stateResetter); ok && shared {
		rs.Unreset(k, state)
	}
	if _, err := e.retrys.SetDeliveryState(e.roundCtx, id, state); err != nil {
		e.log.Warn("cannot undo an operator's reset to pending", "route", r.cfg.Name,
			"source", ev.source, "event_id", ev.id, "state", state, "err", err)
	}
}

// publishAnew puts ev back in the outbox to be published anew (a parked
// one too), for a replay's new delivery on r whose round failed: no
// message of the route carries its schedule, and the new one's round
// waits for its next attempt. Should this process stop first, the next start does it (the
// delivery's reset is still noted: Owed).
func (e *Engine) publishAnew(r *route, ev envelope) {
	if err := e.store.Requeue(context.WithoutCancel(e.roundCtx), nil, []int64{ev.seq}); err != nil {
		e.log.Warn("a replay's new delivery failed and its event cannot be published anew; its next round runs after the next start",
			"route", r.cfg.Name, "source", ev.source, "event_id", ev.id, "err", err)
	}
}

// manualFrom decides an operator's round once it holds the delivery:
// prev is the status it was asked on, cur (or err) the status now. It
// returns the status the round goes on from, and false if none runs: a
// retry (resend false) of a delivery that has succeeded since (whatever
// its attempts say: a store behind the cluster may show the same count),
// or whose status cannot be read (not worth a second delivery; the
// operator can ask again). A round recorded meanwhile is gone on from.
func manualFrom(prev, cur store.DeliveryStatus, err error, resend bool) (store.DeliveryStatus, bool) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return prev, true
	case err != nil:
		return prev, resend
	case cur.State == store.StateSucceeded && !resend:
		return prev, false
	case cur.Attempts != prev.Attempts:
		return cur, true
	}
	return prev, true
}

// Errors of Retry.
var (
	ErrSucceeded    = errors.New("delivery already succeeded")
	ErrUnknownRoute = errors.New("route no longer configured")
	ErrNotRunning   = errors.New("delivery engine is not running")
	// ErrRoundQueued: an operator's round of the delivery is queued or
	// running already (Retry, Replay).
	ErrRoundQueued = errors.New("a retry or replay of this delivery is already queued")
	// ErrBusy: MaxManualRounds operators' rounds are queued or running.
	ErrBusy = errors.New("too many retries and replays queued")
	// ErrRoutePaused: the route is paused by an operator; nothing is
	// sent to it, retries and replays included, until it is resumed.
	ErrRoutePaused = errors.New("the route is paused")
)
