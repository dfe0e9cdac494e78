package outbound

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/jetstream"
	"github.com/hookgate/hookgate/store"
)

// handle runs one message of a route: it decides the message's fate
// (running a round if one is due), then settles it.
func (e *Engine) handle(ctx context.Context, r *route, msg natsjs.Msg) {
	act, held, ok := e.process(ctx, r, msg)
	e.settle(ctx, r, msg, act)
	if ok {
		e.state.Release(held)
	}
}

// settle does with msg what act says: the one place a message is acked,
// nak'd, terminated or handed back. A hand back waits for the server until
// ctx's deadline, or handBackWait; if it fails, a plain nak is the
// fallback. A failure to settle is logged: JetStream then redelivers the
// message after its AckWait, and the delivery's stored state decides what
// that copy does.
func (e *Engine) settle(ctx context.Context, r *route, msg natsjs.Msg, act action) {
	var err error
	switch act.verb {
	case ack:
		err = msg.Ack()
	case nak:
		err = msg.NakWithDelay(act.wait())
	case term:
		err = msg.Term()
	case handBack:
		if err = e.handBack(ctx, msg); err != nil {
			e.log.Warn("cannot hand a message back; nak'd", "route", r.cfg.Name, "err", err)
			err = msg.Nak()
		}
	}
	if err != nil {
		e.log.Warn("cannot settle a message; it is redelivered after its ack wait", "route", r.cfg.Name,
			"action", act.verb.String(), "subject", msg.Subject(), "err", err)
	}
}

// handBack gives a message back at a stop, to be delivered again at once,
// also after a restart (see jetstream.Broker.HandBack).
func (e *Engine) handBack(ctx context.Context, msg natsjs.Msg) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), handBackWait)
		defer cancel()
	}
	return e.broker.HandBack(ctx, msg)
}

// handBackWait bounds how long a stop waits for the server to take
// messages back (those of one fetch together).
const handBackWait = 2 * time.Second

// process decides a message's fate, running a round if one is due. It
// returns the delivery whose round it claimed (ok false: none), to be
// released once the message is settled.
func (e *Engine) process(ctx context.Context, r *route, msg natsjs.Msg) (act action, held DeliveryKey, ok bool) {
	ev, ok := e.messageEnvelope(r, msg)
	if !ok {
		return actTerm, held, false
	}
	paused, here := r.breaker.paused(), r.matches(ev.source, ev.typ)
	wait := elsewhereRetry + rand.N(elsewhereJitter)
	if run, act := triage(paused, here, !paused && !here && e.takenElsewhere(r, ev), wait); !run {
		return act, held, false
	}
	switch {
	case ev.seq <= 0 && !e.adopt(ctx, r, &ev, msg):
		return nakFor(stateRetry), held, false
	}
	md, mderr := msg.Metadata()
	scope := e.manualScope(ctx, r, ev) // a task's token scope
	if r.scopes != nil && r.scopes.full(scope) {
		// Before the claim: a client's backlog costs a lookup, no more.
		var n uint64
		if mderr == nil {
			n = md.NumDelivered
		}
		return nakFor(scopeBusyWait(n)), held, false
	}
	// One round per event at a time: a copy that comes while one runs
	// comes back shortly, and then reads its outcome.
	k := ev.key(r)
	if mderr == nil && md.NumDelivered == 1 {
		k.Fresh = true
	}
	if !e.state.TryClaim(ctx, k) {
		return nakFor(roundRunningRetry), held, false
	}
	prev, err := e.state.Status(ctx, r.cfg.Name, ev.seq, ev.source, ev.id)
	if errors.Is(err, store.ErrOtherEvent) {
		// A claim by identity holds under the adopted seq too: kept,
		// not released and made again.
		_, kept := e.state.(identityClaims)
		if !kept {
			e.state.Release(k)
		}
		if !e.adopt(ctx, r, &ev, msg) {
			return nakFor(stateRetry), k, kept
		}
		if nk := ev.key(r); kept {
			k.Seq = nk.Seq
		} else if k = nk; !e.state.TryClaim(ctx, k) {
			return nakFor(roundRunningRetry), held, false
		}
		prev, err = e.state.Status(ctx, r.cfg.Name, ev.seq, ev.source, ev.id)
	}
	return e.runDue(ctx, r, ev, scope, msg, prev, err), k, true
}

// runDue runs a round of ev if its stored status (prev, or the read's
// err) says one is due, the route's breaker lets it and (a task) its
// token's scope has a slot.
func (e *Engine) runDue(ctx context.Context, r *route, ev envelope, scope string, msg natsjs.Msg, prev store.DeliveryStatus, err error) action {
	now := time.Now()
	took := !errors.Is(err, store.ErrNotFound) || r.tookMessage(msg, ev)
	if run, act := admit(prev, err, took, now); !run {
		return act
	}
	if filtered, act := e.filtered(ctx, r, ev, prev); filtered {
		return act
	}
	if r.scopes != nil {
		if !r.scopes.take(scope) {
			return nakFor(scopeBusyRetry)
		}
		defer r.scopes.give(scope)
	}
	t, ok, wait := r.breaker.allow(now)
	if !ok {
		return nakFor(wait) // paused: nothing is attempted
	}
	// Keep the message while the round runs (a timer, not a goroutine:
	// most rounds end long before the first signal is due).
	keep := keepInProgress(msg, max(e.cfg.AckWait/3, 100*time.Millisecond))
	d := e.round(ctx, r, ev, prev, false)
	keep.stop()
	r.breaker.record(t, d.health, time.Now())
	return d.then
}

// messageEnvelope reads the event a message carries; ok is false (and
// logged) for a message without an event identity.
func (e *Engine) messageEnvelope(r *route, msg natsjs.Msg) (envelope, bool) {
	h := msg.Headers()
	seq, _ := strconv.ParseInt(h.Get(jetstream.HeaderSeq), 10, 64)
	ev, ok := envelopeOf(seq, h.Get(jetstream.HeaderSource), h.Get(jetstream.HeaderEventID),
		h.Get(jetstream.HeaderEventType), h.Get("Content-Type"), msg.Data())
	if !ok || ev.source == "" || ev.id == "" {
		e.log.Error("message without event identity; dropped", "route", r.cfg.Name, "subject", msg.Subject())
		return ev, false
	}
	return ev, true
}

// adopt gives ev the seq its event has in this store, storing the event
// from msg if the store does not hold it: for a message without a
// Hookgate-Seq, or whose seq is not its event's here (published before
// this store was replaced, or a copy of an event retention pruned since).
// It reports false (logged) if the store cannot.
func (e *Engine) adopt(ctx context.Context, r *route, ev *envelope, msg natsjs.Msg) bool {
	h := msg.Headers()
	var streamSeq int64
	if md, err := msg.Metadata(); err == nil {
		streamSeq = int64(md.Sequence.Stream)
	}
	seq, stored, err := e.events.AdoptEvent(ctx, &store.Event{Source: ev.source, ID: ev.id, Type: h.Get(jetstream.HeaderEventType),
		ContentType: h.Get("Content-Type"), Body: msg.Data()}, streamSeq)
	if err != nil {
		e.log.Warn("cannot store the event of a message from elsewhere; redelivering later", "route", r.cfg.Name,
			"source", ev.source, "event_id", ev.id, "err", err)
		return false
	}
	// Storing it is unusual on a single gateway (its store was replaced,
	// or retention pruned the event); in cluster mode (a shared
	// DeliveryState) an event accepted by another gateway comes so.
	lvl := slog.LevelDebug
	if _, single := e.state.(*localState); stored && single {
		lvl = slog.LevelInfo
	}
	e.log.Log(ctx, lvl, "message's Hookgate-Seq is not its event's in this store; delivering under the store's",
		"route", r.cfg.Name, "source", ev.source, "event_id", ev.id, "message_seq", ev.seq, "seq", seq, "stored", stored)
	ev.seq = seq
	return true
}

// inProgress signals a message's progress every interval until stopped.
type inProgress struct {
	mu    sync.Mutex
	t     *time.Timer
	every time.Duration
	msg   natsjs.Msg
	done  bool
}

func keepInProgress(msg natsjs.Msg, every time.Duration) *inProgress {
	k := &inProgress{msg: msg, every: every}
	k.mu.Lock()
	k.t = time.AfterFunc(every, k.signal)
	k.mu.Unlock()
	return k
}

func (k *inProgress) signal() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.done {
		return
	}
	// A lost signal costs at most a redelivery after AckWait, which the
	// event's running round turns away.
	_ = k.msg.InProgress()
	k.t.Reset(k.every)
}

// stop ends the signals; none is sent after it returns.
func (k *inProgress) stop() {
	k.mu.Lock()
	k.done = true
	k.t.Stop()
	k.mu.Unlock()
}
