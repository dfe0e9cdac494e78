package jetstream

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go"
)

// The advisories JetStream publishes in the account when a replicated
// stream or consumer elects a leader.
const (
	streamElectedSubject   = "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.>"
	consumerElectedSubject = "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.>"
)

// elections tells waiters of the leader elections JetStream announces.
// While a stream or consumer has no leader, nobody answers a request to it
// (an info, update or create waits out its whole timeout), and its new
// leader does not answer requests sent before it was elected: a waiter
// gives up on those when a leader is elected and asks again.
type elections struct {
	mu sync.Mutex
	ch chan struct{} // closed at the next election
}

func (e *elections) next() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ch == nil {
		e.ch = make(chan struct{})
	}
	return e.ch
}

func (e *elections) elected(*nats.Msg) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ch != nil {
		close(e.ch)
		e.ch = nil
	}
}

// watch subscribes nc to the election advisories. A user not allowed them
// gets a permissions error (logged by the error handler): waiters then
// wait out their timeouts, as without the advisories.
func (e *elections) watch(nc *nats.Conn) error {
	for _, subj := range []string{streamElectedSubject, consumerElectedSubject} {
		if _, err := nc.Subscribe(subj, e.elected); err != nil {
			return err
		}
	}
	return nil
}

// Elected returns a channel closed at the next leader election JetStream
// announces in the account (any replicated stream's or consumer's: the
// events stream, its consumers, the cluster's buckets). Take it before a
// request, and a wait after the request failed ends with the election.
// The embedded server elects nothing: the channel is not closed.
func (b *Broker) Elected() <-chan struct{} { return b.elections.next() }

// UntilElected returns a context cancelled at the next leader election
// (see Elected), or with ctx. A request to a stream or consumer without a
// leader, made under it, is given up when a leader is elected, and can be
// made again at once rather than after its whole timeout.
func (b *Broker) UntilElected(ctx context.Context) (context.Context, context.CancelFunc) {
	return untilClosed(ctx, b.Elected())
}

// untilClosed is a context cancelled once ch is closed, or with ctx.
func untilClosed(ctx context.Context, ch <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-ch:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
