package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// ConsumerSet is the durable consumers one owner (the deliveries: a
// consumer per route) keeps on the events stream, as data: the broker
// creates them with the stream (EnsureTopology).
type ConsumerSet struct {
	// Consumers are created, or updated to this configuration.
	Consumers []natsjs.ConsumerConfig
	// Owned names the consumers that belong to the owner, a trailing '*'
	// matching any rest. One owned but no longer declared (a removed
	// route's) is deleted (with an external NATS: once nobody pulls from
	// it, see retire): in an interest stream it would hold every message
	// it takes.
	Owned []string
	// Removing, if set, is called before an owned consumer no longer
	// declared is deleted or retired, so that its owner records first
	// that it goes; its error leaves the consumer (EnsureTopology fails).
	Removing func(ctx context.Context) error
}

// owns reports whether the consumer name belongs to the set's owner.
func (s *ConsumerSet) owns(name string) bool {
	for _, o := range s.Owned {
		if p, ok := strings.CutSuffix(o, "*"); ok && strings.HasPrefix(name, p) || o == name {
			return true
		}
	}
	return false
}

// Declare sets the consumers EnsureTopology keeps on the stream. Call it
// before the relay starts.
func (b *Broker) Declare(set ConsumerSet) {
	b.consumersMu.Lock()
	b.consumers = set
	b.consumersMu.Unlock()
}

// EnsureTopology makes sure the events stream exists with every declared
// consumer, and without the owned consumers no longer declared. The relay
// runs it before its first publish and whenever the stream is created
// anew: an interest stream drops what no consumer wants.
func (b *Broker) EnsureTopology(ctx context.Context) error {
	if err := b.EnsureStream(ctx); err != nil {
		return err
	}
	b.consumersMu.Lock()
	set := b.consumers
	b.consumersMu.Unlock()
	want := map[string]bool{}
	for _, cc := range set.Consumers {
		if _, err := b.EnsureConsumer(ctx, cc); err != nil {
			return err
		}
		want[cc.Durable] = true
	}
	if len(set.Owned) == 0 {
		return nil
	}
	stream, err := b.js().Stream(ctx, b.cfg.Stream)
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	names := stream.ConsumerNames(ctx)
	var stale []string
	for name := range names.Name() {
		if !want[name] && set.owns(name) {
			stale = append(stale, name)
		}
	}
	if err := names.Err(); err != nil {
		return fmt.Errorf("list consumers: %w", err)
	}
	if len(stale) > 0 && set.Removing != nil {
		if err := set.Removing(ctx); err != nil {
			return fmt.Errorf("before removing consumers %v: %w", stale, err)
		}
	}
	for _, name := range stale {
		if b.srv == nil {
			if err := b.retire(ctx, stream, name); err != nil {
				return err
			}
			continue
		}
		if err := stream.DeleteConsumer(ctx, name); err != nil {
			return fmt.Errorf("delete consumer %s of a removed route: %w", name, err)
		}
		b.log.Info("deleted the consumer of a route no longer configured", "consumer", name)
	}
	return nil
}

// RetireAfter is how long a consumer no longer declared here is kept on an
// external NATS's stream once nobody pulls from it.
const RetireAfter = time.Hour

// retire hands an owned consumer this gateway no longer declares to the
// server's inactivity threshold (Config.RetireAfter) instead of deleting
// it: on an external NATS another gateway may still run a configuration
// that has the route (a rolling change), and deleting its consumer would
// drop from the interest stream every message only that route wanted. A
// gateway that pulls from it keeps it; one that declares it again clears
// the threshold (EnsureConsumer).
func (b *Broker) retire(ctx context.Context, stream natsjs.Stream, name string) error {
	cons, err := stream.Consumer(ctx, name)
	if errors.Is(err, natsjs.ErrConsumerNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("consumer %s of a removed route: %w", name, err)
	}
	cc := cons.CachedInfo().Config
	if cc.InactiveThreshold > 0 && cc.InactiveThreshold <= b.cfg.RetireAfter {
		return nil
	}
	cc.InactiveThreshold = b.cfg.RetireAfter
	if _, err := stream.UpdateConsumer(ctx, cc); err != nil {
		return fmt.Errorf("retire consumer %s of a removed route: %w", name, err)
	}
	b.log.Info("a route is no longer configured here; its consumer goes once no gateway has pulled from it for a while",
		"consumer", name, "after", b.cfg.RetireAfter)
	return nil
}

// EnsureConsumer creates the durable consumer cc on the events stream, or
// updates it to cc.
func (b *Broker) EnsureConsumer(ctx context.Context, cc natsjs.ConsumerConfig) (natsjs.Consumer, error) {
	b.topoMu.Lock()
	defer b.topoMu.Unlock()
	// As EnsureStream: an update is given up at a leader election of the
	// stream or its consumers and made again, a creation is not (untilMade).
	update := func(uctx context.Context) (natsjs.Consumer, error) {
		return b.js().UpdateConsumer(uctx, b.cfg.Stream, cc)
	}
	cons, err := untilAnswered(ctx, b, update)
	if errors.Is(err, natsjs.ErrConsumerDoesNotExist) || errors.Is(err, natsjs.ErrConsumerNotFound) {
		cons, err = untilMade(ctx, b, func(cctx context.Context) (natsjs.Consumer, error) {
			return b.js().CreateConsumer(cctx, b.cfg.Stream, cc)
		}, update)
		if errors.Is(err, natsjs.ErrConsumerExists) {
			cons, err = untilAnswered(ctx, b, update) // another gateway made it meanwhile
		}
	}
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", cc.Durable, err)
	}
	return cons, nil
}

// StreamState is what the relay needs to know of the events stream to put
// back what it lost.
type StreamState struct {
	// Created is the stream's creation time: another value means the
	// stream was created anew, holding nothing published before.
	Created time.Time
	// LastSeq is the last stream sequence: a stored one past it was lost.
	LastSeq uint64
}

// StreamState asks the server for the events stream's state.
func (b *Broker) StreamState(ctx context.Context) (StreamState, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := b.js().Stream(ctx, b.cfg.Stream)
	if err != nil {
		return StreamState{}, fmt.Errorf("stream info: %w", err)
	}
	info := s.CachedInfo()
	return StreamState{Created: info.Created, LastSeq: info.State.LastSeq}, nil
}

// StreamCreated is the creation time of the stream EnsureStream last found
// or created: another value means the stream was created anew.
func (b *Broker) StreamCreated() time.Time {
	b.streamMu.Lock()
	defer b.streamMu.Unlock()
	return b.streamCreated
}

// ForgetStream forgets that the stream exists, so the next EnsureStream
// creates it (or finds it) again.
func (b *Broker) ForgetStream() {
	b.streamMu.Lock()
	b.streamReady = false
	b.streamMu.Unlock()
}

// StreamGone reports whether err says the stream (or JetStream) is not
// there: EnsureStream, after ForgetStream, creates it again.
func StreamGone(err error) bool {
	return errors.Is(err, natsjs.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, natsjs.ErrStreamNotFound) || errors.Is(err, natsjs.ErrJetStreamNotEnabled)
}
