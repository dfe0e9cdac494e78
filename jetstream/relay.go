package jetstream

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/store"
)

// Message headers on every inbound event message.
const (
	HeaderSource     = "Hookgate-Source"
	HeaderEventID    = "Hookgate-Event-Id"
	HeaderEventType  = "Hookgate-Event-Type"
	HeaderReceivedAt = "Hookgate-Received-At" // RFC 3339, milliseconds
	HeaderSeq        = "Hookgate-Seq"         // the store's intake sequence
)

// MsgID is the Nats-Msg-Id of an event: JetStream drops a re-publish of the
// same event inside the stream's duplicate window.
func MsgID(source, eventID string) string { return source + ":" + eventID }

// Outbox is what the relay needs from the store.
type Outbox interface {
	Unpublished(ctx context.Context, after int64, limit int) ([]store.Event, error)
	MarkPublished(ctx context.Context, acks []store.Published, at time.Time) error
	// Park sets aside an event the broker refused for its content.
	Park(ctx context.Context, seq int64, reason string, at time.Time) error
}

// Refused reports whether err is the broker refusing a message for its
// content (too large, an invalid subject): publishing it again cannot
// succeed, unlike after a timeout, a missing responder or a lost
// connection, which are retried in order.
func Refused(err error) bool {
	if errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrBadSubject) {
		return true
	}
	var apiErr *natsjs.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case natsjs.JSErrCodeStreamMessageExceedsMaximum, natsjs.JSErrCodeBadRequest:
			return true
		}
	}
	return false
}

// streamGone reports whether err says the stream (or JetStream) is not
// there: it is created again, with its consumers, before the next publish.
func streamGone(err error) bool {
	return errors.Is(err, natsjs.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, natsjs.ErrStreamNotFound) || errors.Is(err, natsjs.ErrJetStreamNotEnabled)
}

// RelayConfig tunes a Relay.
type RelayConfig struct {
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
	// Prepare, if set, runs once the stream is reachable and before the
	// first publish (e.g. to put back what the stream lost); the relay
	// retries it until it succeeds.
	Prepare func(ctx context.Context) error
}

// Relay publishes events from the outbox to JetStream and takes them out of
// the outbox on their PubAck. It publishes in intake order, and publishes
// again whatever was not acknowledged; the duplicate window drops repeats.
// What was acknowledged but not recorded is recorded, not published again.
type Relay struct {
	b      *Broker
	outbox Outbox
	cfg    RelayConfig
	log    *slog.Logger
	wake   chan struct{}

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}

	// unmarked are events JetStream acknowledged whose record the store
	// refused. They are recorded before anything is published again: else
	// every retry during a store outage would publish them once more, and
	// past the duplicate window each would be a new message. Used by the
	// run goroutine only (the acker appends before its pass returns).
	unmarked []store.Published
}

// NewRelay returns a relay; Start runs it.
func NewRelay(b *Broker, outbox Outbox, cfg RelayConfig, log *slog.Logger) *Relay {
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
	return &Relay{b: b, outbox: outbox, cfg: cfg, log: log, wake: make(chan struct{}, 1)}
}

// Notify tells the relay the outbox has new events. It never blocks.
func (r *Relay) Notify() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Start runs the relay until Stop. Whatever is in the outbox (left by a
// crash or a NATS outage) is published first.
func (r *Relay) Start(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel != nil {
		return
	}
	ctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	r.done = make(chan struct{})
	go r.run(ctx, r.done)
}

// Stop ends the relay and waits for its current round. Events not yet
// acknowledged stay in the outbox for the next start. Safe to call twice.
func (r *Relay) Stop() {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

func (r *Relay) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	// Stopping: one last try to record what was acknowledged, so it is not
	// published again at the next start.
	defer r.markUnmarked(context.WithoutCancel(ctx))
	backoff := time.Duration(0)
	poll := time.NewTicker(r.cfg.Poll)
	defer poll.Stop()
	prepared := r.cfg.Prepare == nil
	var preparedFor time.Time // the stream incarnation Prepare ran for
	recheck := false          // the stream was reported gone
	healthyAt := time.Now()   // the last pass without an error, or with progress
	var repairedAt time.Time  // the last repair asked of the broker
	checkedAt := time.Now()   // the idle relay's last look at the stream
	brokenChecks := 0         // looks in a row that found it broken
	for {
		var n int
		var err error
		if prepared && recheck {
			// Found again, or created anew: only a new stream needs its
			// consumers and what it lacks (Prepare reads the whole store).
			if err = r.b.EnsureStream(ctx); err == nil {
				recheck = false
				if !r.b.streamIncarnation().Equal(preparedFor) {
					r.log.Warn("outbox relay: the stream was created anew; creating the consumers again and publishing what it lacks")
					prepared = r.cfg.Prepare == nil
				}
			}
		}
		if !prepared {
			if err = r.b.EnsureStream(ctx); err == nil && r.cfg.Prepare != nil {
				preparedFor = r.b.streamIncarnation()
				err = r.cfg.Prepare(ctx)
			}
			prepared = err == nil
		}
		if prepared && err == nil && ctx.Err() == nil {
			err = r.markUnmarked(ctx)
		}
		if prepared && err == nil {
			n, err = r.pass(ctx, poll.C)
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil || n > 0 {
			healthyAt = time.Now()
		}
		if err != nil && streamGone(err) {
			// A stream created anew needs its consumers (an interest
			// stream drops what no consumer wants) and what it lost.
			r.b.streamLost()
			recheck = true
		}
		if err != nil && time.Since(healthyAt) >= r.cfg.StallAfter && time.Since(repairedAt) >= r.cfg.StallAfter {
			repairedAt = time.Now()
			if repaired, rerr := r.b.Repair(ctx); rerr != nil {
				r.log.Warn("outbox relay: publishing stalled; repairing the stream failed", "err", rerr,
					"stalled_for", time.Since(healthyAt).Round(time.Millisecond))
			} else if repaired {
				r.log.Warn("outbox relay: publishing stalled on a broken stream; creating it again, then publishing what it lost from the store",
					"stalled_for", time.Since(healthyAt).Round(time.Millisecond), "cause", err)
				prepared = r.cfg.Prepare == nil
				recheck = false
			}
		}
		switch {
		case err != nil:
			backoff = min(max(2*backoff, 50*time.Millisecond), r.cfg.MaxBackoff)
			r.log.Warn("outbox relay: publishing or recording acks failed, retrying", "err", err, "retry_in", backoff)
			if r.cfg.OnError != nil {
				r.cfg.OnError(err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			select {
			case <-poll.C: // a tick from the wait would end the next pass at once
			default:
			}
			continue
		case n > 0:
			backoff = 0
			continue // more may be waiting
		}
		backoff = 0
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-poll.C:
			// Idle: look at the stream now and then, so that one deleted
			// or broken meanwhile is put back before the next event, with
			// what it lost.
			if prepared && r.cfg.Prepare != nil && time.Since(checkedAt) >= streamCheckEvery {
				checkedAt = time.Now()
				switch created, err := r.b.currentIncarnation(ctx); {
				case streamGone(err):
					r.b.streamLost()
					recheck = true
				case err == nil && !created.Equal(preparedFor):
					r.log.Warn("outbox relay: the stream was created anew; creating the consumers again and publishing what it lacks")
					prepared = false
				}
				if err := r.b.StreamHealth(); err != nil {
					if brokenChecks++; brokenChecks >= 2 {
						brokenChecks = 0
						if repaired, rerr := r.b.Repair(ctx); rerr != nil {
							r.log.Warn("outbox relay: repairing the broken stream failed", "err", rerr)
						} else if repaired {
							prepared, recheck = false, false
						}
					}
				} else {
					brokenChecks = 0
				}
			}
		}
	}
}

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
			f, err := r.b.js.PublishMsgAsync(eventMsg(&evs[i]), natsjs.WithMsgID(MsgID(evs[i].Source, evs[i].ID)))
			if err != nil && Refused(err) {
				err = r.park(ctx, &evs[i], err)
				if err == nil {
					continue // the events behind it go on
				}
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
				acks = append(acks, store.Published{Seq: pb.evs[i].Seq, StreamSeq: int64(ack.Sequence)})
			case err := <-f.Err():
				if Refused(err) {
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

// eventHeaders is the number of headers eventMsg sets.
const eventHeaders = 6

func eventMsg(ev *store.Event) *nats.Msg {
	// One backing array for the header values, one for the texts made
	// here, instead of an allocation per header.
	var buf [64]byte
	b := ev.ReceivedAt.UTC().AppendFormat(buf[:0], "2006-01-02T15:04:05.000Z07:00")
	tsEnd := len(b)
	b = strconv.AppendInt(b, ev.Seq, 10)
	texts := string(b)
	vals := make([]string, eventHeaders)
	vals[0], vals[1], vals[2] = ev.Source, ev.ID, ev.Type
	vals[3], vals[4] = texts[:tsEnd], texts[tsEnd:]
	h := make(nats.Header, eventHeaders)
	h[HeaderSource] = vals[0:1:1]
	h[HeaderEventID] = vals[1:2:2]
	h[HeaderEventType] = vals[2:3:3]
	h[HeaderReceivedAt] = vals[3:4:4]
	h[HeaderSeq] = vals[4:5:5]
	if ev.ContentType != "" {
		vals[5] = ev.ContentType
		h["Content-Type"] = vals[5:6:6]
	}
	return &nats.Msg{Subject: Subject(ev.Source, ev.Type), Header: h, Data: ev.Body}
}
