package relay

import (
	"context"
	"log/slog"
	"time"

	"github.com/hookgate/hookgate/jetstream"
)

// metaStreamCreated records which incarnation of the stream the stored
// stream sequences refer to.
const metaStreamCreated = "stream_created"

// Requeuer is what recovery needs from the store.
type Requeuer interface {
	// Requeue puts published events back in the outbox: seqs to be
	// published again under their first Nats-Msg-Id, anew under one of
	// this requeue (store.Event.RequeuedAt).
	Requeue(ctx context.Context, seqs, anew []int64) error
	Meta(ctx context.Context, key string) (string, error)
	SetMeta(ctx context.Context, key, value string) error
}

// Owed says which published events a consumer of the stream still needs.
// outbound.Engine answers it: only the routes know which events they take
// and which they finished.
type Owed interface {
	// Owed returns the intake sequences of the published events whose
	// stream sequence is past afterStreamSeq (every published event when
	// it is negative) that some route takes and has not finished (lost),
	// those of the events of pending deliveries (a round cut short by a
	// stop: its message is still the route's), and those of pending
	// deliveries an operator reset (reset: a retry or replay cut short by
	// a stop or a crash, whose message the route's consumer may have
	// acked).
	Owed(ctx context.Context, afterStreamSeq int64) (lost, pending, reset []int64, err error)
}

// OwedRequeued is an Owed told once what its last answer returned is back
// in the outbox.
type OwedRequeued interface {
	Requeued(ctx context.Context) error
}

// Recovery puts back in the outbox every published event the stream lost
// that a consumer still needs: all of them when the stream was created
// anew (its store wiped, or deleted on an external server), else those
// whose stream sequence is past the stream's last (a tail lost inside the
// fsync interval), or past the sequence the relay found given twice. It also puts back the event of every pending delivery,
// so that a retry or replay cut short runs again. The event of an
// operator's reset is published anew, under an ID of its requeue
// (jetstream.EventMsgID): the stream's duplicate window may still hold its
// first message's ID, which the route's consumer may have acked; the
// others go under their first ID, which the window drops while their
// first message is still there. Stable Idempotency-Keys make the
// re-delivery safe.
type Recovery struct {
	Store Requeuer
	Owed  Owed
}

// run puts back what the stream of b lost and returns the creation time
// of the stream it recovered.
// lostFrom, if not 0, is a stream sequence found given again to a new
// message while running: the stream lost its tail from there, and later
// messages may have taken those sequences again.
func (rc *Recovery) run(ctx context.Context, b *jetstream.Broker, log *slog.Logger, lostFrom int64) (time.Time, error) {
	state, err := b.StreamState(ctx)
	if err != nil {
		return time.Time{}, err
	}
	created := state.Created.UTC().Format(time.RFC3339Nano)
	known, err := rc.Store.Meta(ctx, metaStreamCreated)
	if err != nil {
		return time.Time{}, err
	}
	after := int64(state.LastSeq)
	if lostFrom > 0 {
		after = min(after, lostFrom-1)
	}
	if known != created {
		after = -1 // a new stream: it holds none of what was published before
	}
	lost, pending, reset, err := rc.Owed.Owed(ctx, after)
	if err != nil {
		return time.Time{}, err
	}
	// A second copy of a message is harmless: the deliveries read the
	// delivery's state before each round.
	requeue := append(lost[:len(lost):len(lost)], pending...)
	if err := rc.Store.Requeue(ctx, requeue, reset); err != nil {
		return time.Time{}, err
	}
	if o, ok := rc.Owed.(OwedRequeued); ok {
		if err := o.Requeued(ctx); err != nil {
			return time.Time{}, err
		}
	}
	if err := rc.Store.SetMeta(ctx, metaStreamCreated, created); err != nil {
		return time.Time{}, err
	}
	if len(lost) > 0 {
		log.Warn("stream lost undelivered events; publishing them again", "events", len(lost),
			"stream_recreated", known != "" && known != created)
	}
	if len(pending)+len(reset) > 0 {
		log.Info("pending deliveries at start (an unfinished retry or replay, or a round cut short); publishing their events again",
			"deliveries", len(pending)+len(reset), "operators", len(reset))
	}
	return state.Created, nil
}
