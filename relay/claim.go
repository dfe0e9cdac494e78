package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/store"
)

// ErrHeldElsewhere is returned by a Publisher that did not publish an
// event because another gateway holds it, after recording that in the
// store (the event left the outbox). The relay goes on with the events
// behind it.
var ErrHeldElsewhere = errors.New("held by another gateway")

// EventClaimer claims an event across the gateways of a cluster before it
// is published (cluster.Claims): holder is "" when this gateway holds the
// claim, else the gateway that does. An error means the cluster could not
// be asked.
type EventClaimer interface {
	ClaimToPublish(ctx context.Context, ev *store.Event) (holder string, err error)
}

// ElsewhereRecorder records an event another gateway holds
// (store.Store.ClaimedElsewhere).
type ElsewhereRecorder interface {
	ClaimedElsewhere(ctx context.Context, seq int64, holder string, at time.Time) error
}

// ClaimingPublisher is cluster mode's Publisher: it claims each event
// before Next publishes it, so that of the gateways that stored copies of
// one event, only the claim's holder publishes it. An event another
// gateway holds is recorded in Store and never published here; a claim
// that cannot be made (NATS unreachable) fails the publish, and the relay
// tries again later with the event still in the outbox.
type ClaimingPublisher struct {
	Claims EventClaimer
	Next   Publisher
	Store  ElsewhereRecorder
	// Timeout bounds each claim. Default 5s.
	Timeout time.Duration
	// Records, if set, publishes the record of each event this gateway
	// holds before the event itself; the event leaves the outbox only
	// once both are acknowledged.
	Records EventRecordPublisher
	// OnElsewhere, if set, is called for each event another gateway holds.
	OnElsewhere func(ev *store.Event, holder string)
	Log         *slog.Logger
}

// PublishEvent claims ev, then publishes it if this gateway holds it.
func (p *ClaimingPublisher) PublishEvent(ev *store.Event) (natsjs.PubAckFuture, error) {
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	if !ev.RequeuedAt.IsZero() {
		// A copy published anew for an operator's retry or replay cut
		// short: the event's claim and record were made when it was
		// first published, here or by the gateway holding it.
		return p.Next.PublishEvent(ev)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	holder, err := p.Claims.ClaimToPublish(ctx, ev)
	if err != nil {
		return nil, fmt.Errorf("claim before publishing: %w", err)
	}
	if holder == "" {
		if p.Records == nil {
			return p.Next.PublishEvent(ev)
		}
		rf, err := p.Records.PublishEventRecord(ev)
		if err != nil {
			return nil, fmt.Errorf("publish the event's record: %w", err)
		}
		f, err := p.Next.PublishEvent(ev)
		if err != nil {
			return nil, err
		}
		return both(rf, f), nil
	}
	if err := p.Store.ClaimedElsewhere(ctx, ev.Seq, holder, time.Now()); err != nil {
		return nil, err
	}
	if p.Log != nil {
		p.Log.Debug("outbox relay: event held by another gateway; not publishing it", "source", ev.Source,
			"event_id", ev.ID, "seq", ev.Seq, "holder", holder)
	}
	if p.OnElsewhere != nil {
		p.OnElsewhere(ev, holder)
	}
	return nil, fmt.Errorf("%s/%s: %w %s", ev.Source, ev.ID, ErrHeldElsewhere, holder)
}

// EventRecordPublisher publishes the record of an event this gateway
// holds to the cluster's other gateways (cluster.Records).
type EventRecordPublisher interface {
	PublishEventRecord(ev *store.Event) (natsjs.PubAckFuture, error)
}

// pair is the future of an event published after its record: its
// PubAck once both are acknowledged, else the first error.
type pair struct {
	ev  natsjs.PubAckFuture
	ok  chan *natsjs.PubAck
	err chan error
}

func both(rec, ev natsjs.PubAckFuture) natsjs.PubAckFuture {
	p := &pair{ev: ev, ok: make(chan *natsjs.PubAck, 1), err: make(chan error, 1)}
	go func() {
		select {
		case <-rec.Ok():
		case err := <-rec.Err():
			p.err <- fmt.Errorf("the event's record: %w", err)
			return
		}
		select {
		case a := <-ev.Ok():
			p.ok <- a
		case err := <-ev.Err():
			p.err <- err
		}
	}()
	return p
}

func (p *pair) Ok() <-chan *natsjs.PubAck { return p.ok }
func (p *pair) Err() <-chan error         { return p.err }
func (p *pair) Msg() *nats.Msg            { return p.ev.Msg() }
