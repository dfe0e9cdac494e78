package jetstream

import (
	natsjs "github.com/nats-io/nats.go/jetstream"

	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
)

// The advisories JetStream publishes in the account when a replicated
// stream or consumer elects a leader: the stream's name follows, then a
// consumer's.
const (
	streamElectedPrefix   = "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED."
	consumerElectedPrefix = "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED."
)

// elections tells waiters of the leader elections JetStream announces,
// each of one stream's (its own or one of its consumers'). While a stream
// or consumer has no leader, nobody answers a request to it (an info,
// update or create waits out its whole timeout), and its new leader does
// not answer requests sent before it was elected: a waiter gives up on
// those when a leader is elected and asks again. Another stream's
// election (another deployment's, another application's in a shared
// account) ends no wait.
type elections struct {
	mu     sync.Mutex
	next   map[string]election // by stream, made by its first waiter
	denied atomic.Bool         // the user may not subscribe to the advisories: said once
}

// election ends at a stream's next election.
type election struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// of is a context cancelled at stream's next election.
func (e *elections) of(stream string) context.Context {
	e.mu.Lock()
	defer e.mu.Unlock()
	if el, ok := e.next[stream]; ok {
		return el.ctx
	}
	if e.next == nil {
		e.next = map[string]election{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.next[stream] = election{ctx, cancel}
	return ctx
}

// elected ends the wait of the stream whose advisory msg is.
func (e *elections) elected(msg *nats.Msg) {
	stream, ok := strings.CutPrefix(msg.Subject, streamElectedPrefix)
	if !ok {
		if stream, ok = strings.CutPrefix(msg.Subject, consumerElectedPrefix); !ok {
			return
		}
		stream, _, _ = strings.Cut(stream, ".")
	}
	e.mu.Lock()
	el, ok := e.next[stream]
	delete(e.next, stream)
	e.mu.Unlock()
	if ok {
		el.cancel()
	}
}

// watch subscribes nc to the election advisories. A user not allowed them
// gets a permissions error from the server, at each connect (see
// refused): waiters then wait out their timeouts, as without the
// advisories.
func (e *elections) watch(nc *nats.Conn) error {
	for _, prefix := range []string{streamElectedPrefix, consumerElectedPrefix} {
		if _, err := nc.Subscribe(prefix+">", e.elected); err != nil {
			return err
		}
	}
	return nil
}

// refused says whether err, an asynchronous error of the connection, is
// the server's refusal of the subscription to the advisories; the first
// one is logged with what it costs, the others at debug level.
func (e *elections) refused(err error, log *slog.Logger) bool {
	if !errors.Is(err, nats.ErrPermissionViolation) ||
		!strings.Contains(err.Error(), `"`+streamElectedPrefix) && !strings.Contains(err.Error(), `"`+consumerElectedPrefix) {
		return false
	}
	if e.denied.Swap(true) {
		log.Debug("nats: the subscription to the leader-election advisories refused again", "err", err)
		return true
	}
	log.Warn("nats: this user may not subscribe to JetStream's leader-election advisories: "+
		"a wait on a stream, consumer or bucket without a leader (a NATS node lost) lasts its whole timeout or backoff (up to 5 s) instead of ending at the election; "+
		"allow the user to subscribe to "+advisories,
		"subjects", streamElectedPrefix+"> "+consumerElectedPrefix+">", "err", err)
	return true
}

// advisories is the subject a user's permissions need to allow for the
// election advisories (README, A secured NATS).
const advisories = "$JS.EVENT.ADVISORY.>"

// Elected returns a channel closed at the next leader election JetStream
// announces of the events stream or one of its consumers. Take it before
// a request, and a wait after the request failed ends with the election.
// The embedded server elects nothing: the channel is nil.
func (b *Broker) Elected() <-chan struct{} {
	if b.srv != nil {
		return nil
	}
	return b.elections.of(b.cfg.Stream).Done()
}

// UntilElected returns a context cancelled at the next leader election of
// the events stream or one of its consumers (see Elected), or with ctx. A
// request to a stream or consumer without a leader, made under it, is
// given up when a leader is elected, and can be made again at once rather
// than after its whole timeout.
func (b *Broker) UntilElected(ctx context.Context) (context.Context, context.CancelFunc) {
	return b.UntilElectedIn(ctx, b.cfg.Stream)
}

// UntilElectedIn is UntilElected for the stream named stream (a KV
// bucket's is KV_<bucket>).
func (b *Broker) UntilElectedIn(ctx context.Context, stream string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	if b.srv != nil {
		return ctx, cancel
	}
	stop := context.AfterFunc(b.elections.of(stream), cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// untilAnswered makes the request f under UntilElected, and again at once
// each time a leader election cuts it while ctx lasts: the election may
// be another group's of the stream (a consumer just created, by this
// gateway or another), announced after the request was made.
func untilAnswered[T any](ctx context.Context, b *Broker, f func(context.Context) (T, error)) (T, error) {
	return Answered(ctx, b.UntilElected, f)
}

// untilMade makes the creation create under Made, at the elections of the
// events stream and its consumers; the embedded server elects nothing.
func untilMade[T any](ctx context.Context, b *Broker, create, find func(context.Context) (T, error)) (T, error) {
	if b.srv != nil {
		return create(ctx)
	}
	return Made(ctx, b.UntilElected, create, find)
}

// Answered makes the request f under a context from cut (UntilElected,
// UntilElectedIn), and again at once each time cut's context ends before
// f answers while ctx lasts.
func Answered[T any](ctx context.Context, cut func(context.Context) (context.Context, context.CancelFunc), f func(context.Context) (T, error)) (T, error) {
	for {
		uctx, cancel := cut(ctx)
		v, err := f(uctx)
		cut := err != nil && uctx.Err() != nil && ctx.Err() == nil
		cancel()
		if !cut {
			return v, err
		}
	}
}

// Made makes the creation create, which elects its group's first leader:
// it is never cut short at an election, and its answer is awaited while
// ctx lasts. nats-server answers only one of equal creations in flight at
// once (gateways started together on a new NATS cluster), so at each
// election of the group (cut's context ending) before create answers,
// what was made is also looked up (find, under Answered): found, it is
// the creation's answer, as the server's answer to an equal creation is;
// not found yet, the wait goes on. A creation answered at its own
// election is answered before the lookup, and taken. One answered
// without a leader (a member that made it answering an equal creation
// before the group's election, when a lookup can still find nothing) is
// taken once what it made is found.
func Made[T any](ctx context.Context, cut func(context.Context) (context.Context, context.CancelFunc), create, find func(context.Context) (T, error)) (T, error) {
	type answer struct {
		v   T
		err error
	}
	ctx, end := context.WithCancel(ctx) // ends the requests left unanswered
	defer end()
	created, found := make(chan answer, 1), make(chan answer, 1)
	elected, cancel := cut(ctx) // taken before the request: no election missed
	defer func() { cancel() }()
	go func() {
		v, err := create(ctx)
		created <- answer{v, err}
	}()
	var early *answer // create's answer without a leader
	finding := false
	look := func() {
		if !finding {
			finding = true
			go func() {
				v, err := Answered(ctx, cut, find)
				found <- answer{v, err}
			}()
		}
	}
	for {
		select {
		case a := <-created:
			if a.err != nil || !leaderless(a.v) || elected.Err() != nil {
				return a.v, a.err
			}
			early = &a
			look()
			continue
		case a := <-found:
			finding = false
			if a.err == nil {
				return a.v, nil
			}
			continue
		case <-elected.Done():
		}
		cancel()
		if ctx.Err() != nil {
			if early != nil {
				return early.v, early.err
			}
			a := <-created
			return a.v, a.err
		}
		elected, cancel = cut(ctx)
		look()
	}
}

// leaderless says whether v, a stream or consumer as a request answered
// it, was in a group without a leader.
func leaderless(v any) bool {
	var ci *natsjs.ClusterInfo
	switch v := v.(type) {
	case natsjs.Stream:
		ci = v.CachedInfo().Cluster
	case natsjs.Consumer:
		ci = v.CachedInfo().Cluster
	}
	return ci != nil && ci.Leader == ""
}
