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
}

// RelayConfig tunes a Relay.
type RelayConfig struct {
	// Batch is the most events published before their acks are awaited.
	// Default 256.
	Batch int
	// Poll is how often the outbox is read without a Notify. Default 1s.
	Poll time.Duration
	// MaxBackoff caps the wait after a failed round. Default 5s.
	MaxBackoff time.Duration
	// OnPublished, if set, is called with the number of events marked
	// published after each round; OnError with each publish error.
	OnPublished func(n int)
	OnError     func(err error)
	// Prepare, if set, runs once the stream is reachable and before the
	// first publish (e.g. to put back what the stream lost); the relay
	// retries it until it succeeds.
	Prepare func(ctx context.Context) error
}

// Relay publishes events from the outbox to JetStream and takes them out of
// the outbox on their PubAck. It publishes in intake order, and publishes
// again whatever was not acknowledged; the duplicate window drops repeats.
type Relay struct {
	b      *Broker
	outbox Outbox
	cfg    RelayConfig
	log    *slog.Logger
	wake   chan struct{}

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// NewRelay returns a relay; Start runs it.
func NewRelay(b *Broker, outbox Outbox, cfg RelayConfig, log *slog.Logger) *Relay {
	if cfg.Batch <= 0 {
		cfg.Batch = 256
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 5 * time.Second
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
	backoff := time.Duration(0)
	poll := time.NewTicker(r.cfg.Poll)
	defer poll.Stop()
	prepared := r.cfg.Prepare == nil
	for {
		var n int
		var err error
		if !prepared {
			if err = r.b.EnsureStream(ctx); err == nil {
				err = r.cfg.Prepare(ctx)
			}
			prepared = err == nil
		}
		if prepared {
			n, err = r.round(ctx)
		}
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil:
			backoff = min(max(2*backoff, 50*time.Millisecond), r.cfg.MaxBackoff)
			r.log.Warn("outbox relay: publish failed, retrying", "err", err, "retry_in", backoff)
			if r.cfg.OnError != nil {
				r.cfg.OnError(err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
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
		}
	}
}

// round publishes one batch and records what was acknowledged.
func (r *Relay) round(ctx context.Context) (int, error) {
	evs, err := r.outbox.Unpublished(ctx, 0, r.cfg.Batch)
	if err != nil || len(evs) == 0 {
		return 0, err
	}
	if err := r.b.EnsureStream(ctx); err != nil {
		return 0, err
	}
	futures := make([]natsjs.PubAckFuture, 0, len(evs))
	var firstErr error
	for i := range evs {
		f, err := r.b.js.PublishMsgAsync(eventMsg(&evs[i]), natsjs.WithMsgID(MsgID(evs[i].Source, evs[i].ID)))
		if err != nil {
			firstErr = err
			break
		}
		futures = append(futures, f)
	}
	acked := make([]store.Published, 0, len(futures))
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			acked = append(acked, store.Published{Seq: evs[i].Seq, StreamSeq: int64(ack.Sequence)})
		case err := <-f.Err():
			if firstErr == nil {
				firstErr = err
			}
		case <-ctx.Done():
			// Stopping: record what was acknowledged so far.
			if firstErr == nil {
				firstErr = ctx.Err()
			}
		}
		if ctx.Err() != nil {
			break
		}
	}
	if firstErr != nil && (errors.Is(firstErr, natsjs.ErrNoStreamResponse) || errors.Is(firstErr, nats.ErrNoResponders)) {
		r.b.streamLost()
	}
	if len(acked) > 0 {
		// Record with a context of its own: a stop must not lose the record
		// of acks already received (they would only be published again).
		if err := r.outbox.MarkPublished(context.WithoutCancel(ctx), acked, time.Now()); err != nil {
			return 0, err
		}
		if r.cfg.OnPublished != nil {
			r.cfg.OnPublished(len(acked))
		}
	}
	return len(acked), firstErr
}

func eventMsg(ev *store.Event) *nats.Msg {
	m := nats.NewMsg(Subject(ev.Source, ev.Type))
	m.Data = ev.Body
	m.Header.Set(HeaderSource, ev.Source)
	m.Header.Set(HeaderEventID, ev.ID)
	m.Header.Set(HeaderEventType, ev.Type)
	m.Header.Set(HeaderReceivedAt, ev.ReceivedAt.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	m.Header.Set(HeaderSeq, strconv.FormatInt(ev.Seq, 10))
	if ev.ContentType != "" {
		m.Header.Set("Content-Type", ev.ContentType)
	}
	return m
}
