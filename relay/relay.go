// Package relay moves accepted events from the store's outbox to the
// events stream, the second step of an event's path: inbound claims it
// into the store (the event and its outbox row in one commit) and calls
// Notify; the relay reads the outbox in intake order, publishes each event
// through a Publisher (the broker, package jetstream) and takes it out of
// the outbox on its PubAck (Store.MarkPublished); outbound's consumers take
// it from the stream.
//
// The relay also keeps the stream fit to carry what it publishes. Before
// its first publish, and whenever the stream was created anew or repaired,
// it asks the broker for the stream and the consumers outbound declared
// (Broker.EnsureTopology: an interest stream drops what no consumer
// wants), then puts back in the outbox what the stream lost (recover.go):
// the store says which events were published into which stream, the
// broker what that stream still holds, and Owed, which events some
// consumer still needs. Owed is the one question the relay asks of
// outbound (outbound.Engine answers it: only its routes know which events
// they take); it is asked, not called back, and the relay does nothing
// else with outbound.
package relay

import (
	"context"
	"errors"
	"log/slog"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/internal/startstop"
	"github.com/hookgate/hookgate/jetstream"
	"github.com/hookgate/hookgate/store"
)

// Outbox is what the relay publishes from: the store's outbox.
type Outbox interface {
	Unpublished(ctx context.Context, after int64, limit int) ([]store.Event, error)
	MarkPublished(ctx context.Context, acks []store.Published, at time.Time) error
	// Park sets aside an event the broker refused for its content.
	Park(ctx context.Context, seq int64, reason string, at time.Time) error
}

// Publisher puts an event's message on the events stream; the future
// brings its PubAck. The broker is the default one; cluster mode wraps it
// to claim each event before it is published.
type Publisher interface {
	PublishEvent(ev *store.Event) (natsjs.PubAckFuture, error)
}

// Config tunes a Relay.
type Config struct {
	// Batch is the most events read from the outbox and published at once.
	// Default 256.
	Batch int
	// InFlight is how many more published batches may await their acks
	// (and their record in the store) while the next is read and
	// published. Default 2: with Batch 256, at most 1,024 messages are
	// unacknowledged, the broker's limit of async publishes.
	InFlight int
	// Poll is how often the outbox is read without a Notify. Default 1s.
	Poll time.Duration
	// MaxBackoff caps the wait after a failed round. Default 5s.
	MaxBackoff time.Duration
	// OnPublished, if set, is called with the number of events marked
	// published after each round; OnError with each publish error.
	OnPublished func(n int)
	OnError     func(err error)
	// OnParked, if set, is called with each event the broker refused for
	// its content, once it is set aside in the store.
	OnParked func(ev *store.Event, reason error)
	// StallAfter is how long publishing may fail without any progress
	// before the relay asks the broker to repair its stream (see
	// Broker.Repair). Default 10s.
	StallAfter time.Duration
	// Publisher publishes each event. Default: the broker.
	Publisher Publisher
	// Recovery, if set, puts back in the outbox what the stream lost,
	// before the first publish and whenever the stream is created anew
	// (see Recovery). Unset, nothing is put back.
	Recovery *Recovery
}

// Relay publishes events from the outbox to JetStream and takes them out of
// the outbox on their PubAck. It publishes in intake order, and publishes
// again whatever was not acknowledged; the duplicate window drops repeats.
// What was acknowledged but not recorded is recorded, not published again.
type Relay struct {
	b      *jetstream.Broker
	pub    Publisher
	outbox Outbox
	cfg    Config
	log    *slog.Logger
	wake   chan struct{}
	loop   startstop.Loop

	// unmarked are events JetStream acknowledged whose record the store
	// refused. They are recorded before anything is published again: else
	// every retry during a store outage would publish them once more, and
	// past the duplicate window each would be a new message. Used by the
	// run goroutine only (the acker appends before its pass returns).
	unmarked []store.Published
	// highest is the highest stream sequence acknowledged for a new
	// message since the stream was prepared, lostFrom the lowest found
	// given again (0: none): the stream lost its tail (noteAck). As
	// unmarked, the run goroutine's.
	highest, lostFrom int64
}

// New returns a relay from outbox to b's events stream; Start runs it.
func New(outbox Outbox, b *jetstream.Broker, cfg Config, log *slog.Logger) *Relay {
	if cfg.Batch <= 0 {
		cfg.Batch = 256
	}
	if cfg.InFlight <= 0 {
		cfg.InFlight = 2
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 5 * time.Second
	}
	if cfg.StallAfter <= 0 {
		cfg.StallAfter = 10 * time.Second
	}
	r := &Relay{b: b, pub: cfg.Publisher, outbox: outbox, cfg: cfg, log: log, wake: make(chan struct{}, 1)}
	if r.pub == nil {
		r.pub = b
	}
	return r
}

// Notify tells the relay the outbox has new events. It never blocks.
func (r *Relay) Notify() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Start runs the relay until Stop. Whatever is in the outbox (left by a
// crash or a NATS outage) is published first. Starting a running relay
// does nothing.
func (r *Relay) Start(ctx context.Context) error {
	r.loop.Start(ctx, r.run)
	return nil
}

// Stop ends the relay and waits for its current round, whose acks already
// received are recorded before it returns (the store must not close
// first). Events not yet acknowledged stay in the outbox for the next
// start. Safe to call twice, and without Start.
func (r *Relay) Stop(context.Context) error {
	r.loop.Stop()
	return nil
}

// runState is what the run loop carries from one round to the next.
type runState struct {
	prepared     bool
	preparedFor  time.Time // the stream incarnation prepare ran for
	recheck      bool      // the stream was reported gone
	healthyAt    time.Time // the last pass without an error, or with progress
	repairedAt   time.Time // the last repair asked of the broker
	checkedAt    time.Time // the idle relay's last look at the stream
	brokenChecks int       // looks in a row that found it broken
	backoff      time.Duration
	elected      <-chan struct{} // closed by a leader election since the round began
}

func (r *Relay) run(ctx context.Context) {
	// Stopping: one last try to record what was acknowledged, so it is not
	// published again at the next start.
	defer func() {
		if err := r.markUnmarked(context.WithoutCancel(ctx)); err != nil {
			r.log.Warn("outbox relay: stopping; acks not recorded, their events will be published again", "events", len(r.unmarked), "err", err)
		}
	}()
	poll := time.NewTicker(r.cfg.Poll)
	defer poll.Stop()
	now := time.Now()
	st := &runState{healthyAt: now, checkedAt: now}
	for {
		st.elected = r.b.Elected()
		n, err := r.round(ctx, st, poll.C)
		if ctx.Err() != nil {
			return
		}
		r.settle(ctx, st, n, err)
		var more bool
		switch {
		case err != nil:
			more = r.backOff(ctx, st, err, poll.C)
		case n > 0:
			st.backoff = 0
			more = true // more may be waiting
		default:
			st.backoff = 0
			more = r.idle(ctx, st, poll.C)
		}
		if !more {
			return
		}
	}
}

// round readies the stream if it needs it, records what a failed record
// left and publishes one pass. It returns the number of events recorded as
// published.
func (r *Relay) round(ctx context.Context, st *runState, tick <-chan time.Time) (n int, err error) {
	if st.prepared && st.recheck {
		err = r.recheckStream(ctx, st)
	}
	if !st.prepared {
		if len(r.unmarked) > 0 {
			// Acks of the stream before (created anew, or repaired): their
			// events are not in this one; they stay in the outbox and are
			// published to it.
			r.log.Warn("outbox relay: acks of the stream before are not recorded; their events are published to the new one",
				"events", len(r.unmarked))
			r.unmarked = r.unmarked[:0]
		}
		st.preparedFor, err = r.prepare(ctx)
		st.prepared = err == nil
	}
	if st.prepared && err == nil && ctx.Err() == nil {
		err = r.markUnmarked(ctx)
	}
	if st.prepared && err == nil {
		n, err = r.pass(ctx, tick)
	}
	if r.lostFrom > 0 && st.prepared {
		r.log.Warn("outbox relay: the stream gave a sequence again: it lost its tail (a server crash inside its fsync interval?); publishing what it lost again",
			"from_stream_seq", r.lostFrom)
		st.prepared = false
	}
	return n, err
}

// recheckStream looks for the stream reported gone: found again, or
// created anew. Only a new stream needs its consumers and what it lacks
// (recovery reads the whole store).
func (r *Relay) recheckStream(ctx context.Context, st *runState) error {
	// A stream without a leader answers nothing: EnsureStream gives up at
	// its new leader's election.
	if err := r.b.EnsureStream(ctx); err != nil {
		return err
	}
	st.recheck = false
	if !r.b.StreamCreated().Equal(st.preparedFor) {
		r.log.Warn("outbox relay: the stream was created anew; creating the consumers again and publishing what it lacks")
		st.prepared = false
	}
	return nil
}

// settle follows a round's outcome: a stream reported gone is looked for
// again, and publishing failing without progress for StallAfter asks the
// broker to repair the stream.
func (r *Relay) settle(ctx context.Context, st *runState, n int, err error) {
	if err == nil || n > 0 {
		st.healthyAt = time.Now()
	}
	if err == nil {
		return
	}
	if jetstream.StreamGone(err) {
		// A stream created anew needs its consumers (an interest
		// stream drops what no consumer wants) and what it lost.
		r.b.ForgetStream()
		st.recheck = true
	}
	if time.Since(st.healthyAt) >= r.cfg.StallAfter && time.Since(st.repairedAt) >= r.cfg.StallAfter {
		r.repairStalled(ctx, st, err)
	}
}

// repairStalled asks the broker to repair a stream publishing stalled on
// (cause: the round's error).
func (r *Relay) repairStalled(ctx context.Context, st *runState, cause error) {
	st.repairedAt = time.Now()
	repaired, err := r.b.Repair(ctx)
	switch {
	case err != nil:
		r.log.Warn("outbox relay: publishing stalled; repairing the stream failed", "err", err,
			"stalled_for", time.Since(st.healthyAt).Round(time.Millisecond))
	case repaired:
		r.log.Warn("outbox relay: publishing stalled on a broken stream; creating it again, then publishing what it lost from the store",
			"stalled_for", time.Since(st.healthyAt).Round(time.Millisecond), "cause", cause)
		st.prepared, st.recheck = false, false
	}
}

// backOff waits after a failed round, twice as long as after the one
// before (50ms to MaxBackoff), or until a leader election JetStream
// announced since the round began (a stream without a leader refuses
// publishes until then). It returns false if ctx ended.
func (r *Relay) backOff(ctx context.Context, st *runState, err error, tick <-chan time.Time) bool {
	st.backoff = min(max(2*st.backoff, 50*time.Millisecond), r.cfg.MaxBackoff)
	r.log.Warn("outbox relay: publishing or recording acks failed, retrying", "err", err, "retry_in", st.backoff)
	if r.cfg.OnError != nil {
		r.cfg.OnError(err)
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(st.backoff):
	case <-st.elected:
	}
	select {
	case <-tick: // a tick from the wait would end the next pass at once
	default:
	}
	return true
}

// idle waits for a Notify or the poll tick, and at a tick now and then
// looks at the stream. It returns false if ctx ended.
func (r *Relay) idle(ctx context.Context, st *runState, tick <-chan time.Time) bool {
	select {
	case <-ctx.Done():
		return false
	case <-r.wake:
	case <-tick:
		if st.prepared && time.Since(st.checkedAt) >= streamCheckEvery {
			st.checkedAt = time.Now()
			r.checkStream(ctx, st)
		}
	}
	return true
}

// checkStream is the idle relay's look at the stream, so that one deleted
// or broken meanwhile is put back before the next event, with what it
// lost. A stream found broken twice in a row is repaired.
func (r *Relay) checkStream(ctx context.Context, st *runState) {
	switch state, err := r.b.StreamState(ctx); {
	case jetstream.StreamGone(err):
		r.b.ForgetStream()
		st.recheck = true
	case err == nil && !state.Created.Equal(st.preparedFor):
		r.log.Warn("outbox relay: the stream was created anew; creating the consumers again and publishing what it lacks")
		st.prepared = false
	case err == nil && int64(state.LastSeq) < r.highest:
		r.log.Warn("outbox relay: the stream ends before what it acknowledged: it lost its tail (a server crash inside its fsync interval?); publishing what it lost again",
			"last_seq", state.LastSeq, "acknowledged", r.highest)
		r.lostFrom = int64(state.LastSeq) + 1
		st.prepared = false
	}
	if err := r.b.StreamHealth(); err != nil {
		if st.brokenChecks++; st.brokenChecks < 2 {
			return
		}
		st.brokenChecks = 0
		if repaired, rerr := r.b.Repair(ctx); rerr != nil {
			r.log.Warn("outbox relay: repairing the broken stream failed", "err", rerr)
		} else if repaired {
			st.prepared, st.recheck = false, false
		}
		return
	}
	st.brokenChecks = 0
}

// prepare readies the stream for the next publish: the stream and the
// declared consumers (Broker.EnsureTopology), then what the stream lost
// back in the outbox (Recovery). It returns the stream incarnation it
// prepared.
func (r *Relay) prepare(ctx context.Context) (time.Time, error) {
	// The stream as it is now, not as EnsureStream last saw it: another
	// gateway may have made it anew.
	r.b.ForgetStream()
	if err := r.b.EnsureTopology(ctx); err != nil {
		return time.Time{}, err
	}
	created := r.b.StreamCreated()
	if r.cfg.Recovery != nil {
		recovered, err := r.cfg.Recovery.run(ctx, r.b, r.log, r.lostFrom)
		if err != nil {
			return time.Time{}, err
		}
		if !recovered.Equal(created) {
			// Made anew after its consumers were: what recovery put back
			// waits in the outbox for the next prepare's consumers.
			r.b.ForgetStream()
			return time.Time{}, errMadeAnew
		}
	}
	r.highest, r.lostFrom = 0, 0
	return created, nil
}

// noteAck follows the stream sequences of new messages: one given again
// (at or below one given before to this stream) means the stream lost its
// tail, as a server that crashed inside its fsync interval does when it
// comes back: what was published into it is owed again. A duplicate's
// sequence is its first copy's.
func (r *Relay) noteAck(a *natsjs.PubAck) {
	if a.Duplicate {
		return
	}
	seq := int64(a.Sequence)
	if seq <= r.highest && (r.lostFrom == 0 || seq < r.lostFrom) {
		r.lostFrom = seq
	}
	r.highest = max(r.highest, seq)
}

// errMadeAnew: the stream was made anew while the relay prepared for it.
var errMadeAnew = errors.New("outbox relay: the stream was made anew while its consumers were made; preparing again")

// streamCheckEvery is how often an idle relay looks at the stream.
const streamCheckEvery = 5 * time.Second

// markUnmarked records the acknowledged events a failed record left.
func (r *Relay) markUnmarked(ctx context.Context) error {
	if len(r.unmarked) == 0 {
		return nil
	}
	if err := r.outbox.MarkPublished(context.WithoutCancel(ctx), r.unmarked, time.Now()); err != nil {
		return err
	}
	if r.cfg.OnPublished != nil {
		r.cfg.OnPublished(len(r.unmarked))
	}
	r.unmarked = r.unmarked[:0]
	return nil
}

// pubBatch is a batch of events published and awaiting their acks.
type pubBatch struct {
	evs     []store.Event
	futures []natsjs.PubAckFuture // one per event published; fewer if publishing failed
}

// pass publishes the outbox in intake order, pipelined: while the acks of
// up to InFlight batches are awaited and recorded (one group commit per
// batch), the next batch is read and published. It ends when the outbox
// has nothing after what it published, at the first error, or at the poll
// tick (so that events put back in the outbox behind the cursor, e.g. by
// recovery, are published within a poll interval even under constant
// load). It returns the number of events recorded as published.
func (r *Relay) pass(ctx context.Context, tick <-chan time.Time) (int, error) {
	inflight := make(chan *pubBatch, r.cfg.InFlight)
	failed := make(chan struct{})      // closed by the acker at its first error
	progress := make(chan struct{}, 1) // the acker finished a batch
	var marked int
	var ackErr error
	acked := make(chan struct{})
	go func() {
		defer close(acked)
		marked, ackErr = r.acker(ctx, inflight, failed, progress)
	}()
	var cursor int64
	var pubErr error
publish:
	for ctx.Err() == nil {
		select {
		case <-failed:
			break publish
		case <-tick:
			break publish
		default:
		}
		evs, err := r.outbox.Unpublished(ctx, cursor, r.cfg.Batch)
		if err != nil || len(evs) == 0 {
			pubErr = err
			break
		}
		if err := r.b.EnsureStream(ctx); err != nil {
			pubErr = err
			break
		}
		// evs[:0]: a parked event is left out in place, keeping each future
		// at its event's index.
		pb := &pubBatch{evs: evs[:0], futures: make([]natsjs.PubAckFuture, 0, len(evs))}
		for i := range evs {
			f, skip, err := r.publish(ctx, &evs[i])
			if skip {
				continue // the events behind it go on
			}
			if err != nil {
				pubErr = err
				break
			}
			pb.evs = append(pb.evs, evs[i])
			pb.futures = append(pb.futures, f)
		}
		if len(pb.futures) > 0 {
			inflight <- pb // the acker takes every batch, even after a failure
		}
		if pubErr != nil {
			break
		}
		cursor = evs[len(evs)-1].Seq
		if len(evs) < r.cfg.Batch {
			// Caught up with the outbox: let events gather for one batch
			// recorded (about one group commit) instead of reading them a
			// few at a time. With a backlog, full batches do not wait.
			select {
			case <-progress:
			case <-failed:
			case <-tick:
				break publish
			case <-ctx.Done():
			}
		}
	}
	close(inflight)
	<-acked
	err := pubErr
	if err == nil {
		err = ackErr
	}
	return marked, err
}

// publish publishes ev; skip is true when ev left the outbox instead:
// parked (the broker refused it for its content), or recorded by the
// Publisher as held by another gateway.
func (r *Relay) publish(ctx context.Context, ev *store.Event) (f natsjs.PubAckFuture, skip bool, err error) {
	f, err = r.pub.PublishEvent(ev)
	switch {
	case errors.Is(err, ErrHeldElsewhere):
		return nil, true, nil
	case err != nil && jetstream.Refused(err):
		if err = r.park(ctx, ev, err); err == nil {
			return nil, true, nil
		}
	}
	return f, false, err
}

// park sets ev aside in the store: the broker refused it for its content.
func (r *Relay) park(ctx context.Context, ev *store.Event, reason error) error {
	if err := r.outbox.Park(context.WithoutCancel(ctx), ev.Seq, reason.Error(), time.Now()); err != nil {
		return err
	}
	r.log.Error("outbox relay: the broker refused an event; parked it and publishing those behind it (see GET /v1/outbox/parked)",
		"source", ev.Source, "event_id", ev.ID, "seq", ev.Seq, "body_bytes", len(ev.Body), "reason", reason)
	if r.cfg.OnParked != nil {
		r.cfg.OnParked(ev, reason)
	}
	return nil
}

// acker awaits the acks of each published batch in turn and takes the
// acknowledged events out of the outbox, signalling progress after each.
// It returns how many it recorded and the first error; it closes failed at
// that error.
func (r *Relay) acker(ctx context.Context, inflight <-chan *pubBatch, failed, progress chan<- struct{}) (int, error) {
	var firstErr error
	fail := func(err error) {
		if firstErr == nil {
			firstErr = err
			close(failed)
		}
	}
	marked := 0
	var acks []store.Published
	for pb := range inflight {
		acks = acks[:0]
		for i, f := range pb.futures {
			if ctx.Err() != nil {
				// Stopping: record what was acknowledged already.
				select {
				case ack := <-f.Ok():
					acks = append(acks, store.Published{Seq: pb.evs[i].Seq, StreamSeq: int64(ack.Sequence)})
				default:
					fail(ctx.Err())
				}
				continue
			}
			select {
			case ack := <-f.Ok():
				r.noteAck(ack)
				acks = append(acks, store.Published{Seq: pb.evs[i].Seq, StreamSeq: int64(ack.Sequence)})
			case err := <-f.Err():
				if jetstream.Refused(err) {
					if err = r.park(ctx, &pb.evs[i], err); err == nil {
						continue
					}
				}
				fail(err)
			case <-ctx.Done():
				select {
				case ack := <-f.Ok():
					acks = append(acks, store.Published{Seq: pb.evs[i].Seq, StreamSeq: int64(ack.Sequence)})
				default:
					fail(ctx.Err())
				}
			}
		}
		if len(acks) == 0 {
			continue
		}
		// Record with a context of its own: a stop must not lose the record
		// of acks already received (they would only be published again).
		if err := r.outbox.MarkPublished(context.WithoutCancel(ctx), acks, time.Now()); err != nil {
			r.unmarked = append(r.unmarked, acks...)
			fail(err)
			continue
		}
		marked += len(acks)
		if r.cfg.OnPublished != nil {
			r.cfg.OnPublished(len(acks))
		}
		select {
		case progress <- struct{}{}:
		default:
		}
	}
	return marked, firstErr
}
