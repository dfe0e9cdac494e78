package outbound

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// pull feeds a route's messages to at most Concurrency rounds at a time.
// It fetches only as many messages as it has free workers, and waits for
// each fetch to end (at most fetchWait): nothing is left pulled but
// unhandled, so a stop hands every message back at once instead of
// leaving it to JetStream's AckWait. The workers live as long as pull (a
// goroutine per message would grow its stack in every round).
func (e *Engine) pull(pullCtx, roundCtx context.Context, r *route) {
	defer e.pullers.Done()
	p := &puller{e: e, r: r, sem: make(chan struct{}, r.cfg.Concurrency), work: make(chan natsjs.Msg, r.cfg.Concurrency)}
	defer close(p.work)
	for range r.cfg.Concurrency {
		go p.worker(roundCtx)
	}
	if !e.announce(pullCtx, r) {
		return
	}
	var cons natsjs.Consumer
	for pullCtx.Err() == nil {
		if cons == nil {
			if cons = p.consumer(pullCtx); cons == nil {
				return
			}
		}
		n, ok := p.reserve(pullCtx)
		if !ok {
			return
		}
		elected := p.e.broker.Elected()
		if wait := p.fetch(pullCtx, cons, n); wait > 0 {
			cons = nil // look it up again
			if !sleepUnless(pullCtx, wait, elected) {
				return
			}
		}
	}
}

// fetchWait bounds one fetch: how long a stop may wait for it to end.
const fetchWait = time.Second

// puller is one route's fetch loop and its workers.
type puller struct {
	e    *Engine
	r    *route
	sem  chan struct{} // a token per worker busy or reserved for a fetch
	work chan natsjs.Msg
	// noLeader is the run of fetches that found no responders.
	noLeader noLeaderRun
}

func (p *puller) worker(roundCtx context.Context) {
	for msg := range p.work {
		p.e.handle(roundCtx, p.r, msg)
		<-p.sem
		p.e.inflight.Done()
	}
}

// consumer makes sure of the stream and the route's consumer, retrying
// every second, or at once after a leader election (a stream or consumer
// without a leader answers nothing until then); nil once ctx ends.
func (p *puller) consumer(ctx context.Context) natsjs.Consumer {
	for {
		elected := p.e.broker.Elected()
		cons, err := p.lookUp(ctx)
		if err == nil {
			p.e.agreeSince(ctx, p.r, cons.CachedInfo().Created)
			return cons
		}
		if ctx.Err() != nil {
			return nil
		}
		p.e.log.Warn("route consumer unavailable; retrying", "route", p.r.cfg.Name, "err", err)
		if !sleepUnless(ctx, time.Second, elected) {
			return nil
		}
	}
}

// lookUp makes sure of the stream and the route's consumer (each given up
// at the next leader election while it has no leader).
func (p *puller) lookUp(ctx context.Context) (natsjs.Consumer, error) {
	if err := p.e.broker.EnsureStream(ctx); err != nil {
		return nil, err
	}
	return p.e.ensureConsumer(ctx, p.r)
}

// reserve takes one free worker (waiting for it), then every other free
// one, and says how many; false once ctx ends.
func (p *puller) reserve(ctx context.Context) (int, bool) {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return 0, false
	}
	n := 1
	for n < cap(p.sem) {
		select {
		case p.sem <- struct{}{}:
			n++
		default:
			return n, true
		}
	}
	return n, true
}

// free gives back n reserved workers.
func (p *puller) free(n int) {
	for range n {
		<-p.sem
	}
}

// fetch fetches up to n messages (n workers are reserved) and gives them
// to the workers. After a failure it returns how long to wait before the
// consumer is looked up again, else 0.
func (p *puller) fetch(ctx context.Context, cons natsjs.Consumer, n int) time.Duration {
	batch, err := cons.Fetch(n, natsjs.FetchMaxWait(fetchWait))
	if err != nil {
		p.free(n)
		if ctx.Err() == nil {
			p.e.log.Warn("route fetch failed; retrying", "route", p.r.cfg.Name, "err", err)
		}
		return time.Second
	}
	p.free(n - p.dispatch(ctx, batch))
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
		p.e.log.Log(ctx, p.noLeader.level(err, time.Now()), "route fetch interrupted", "route", p.r.cfg.Name, "err", err)
		return 250 * time.Millisecond
	}
	p.noLeader = noLeaderRun{}
	return 0
}

// noLeaderGrace is how long "no responders" (the consumer has no leader:
// just created, or a NATS leader election) is expected and logged at
// debug level; past it, a warning.
const noLeaderGrace = 15 * time.Second

// noLeaderRun is a run of fetches that found no responders.
type noLeaderRun struct {
	since time.Time // zero: none
}

// level is the level to log err at, the run going on at now.
func (r *noLeaderRun) level(err error, now time.Time) slog.Level {
	if !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, natsjs.ErrNoStreamResponse) {
		return slog.LevelWarn
	}
	if r.since.IsZero() {
		r.since = now
	}
	if now.Sub(r.since) < noLeaderGrace {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}

// dispatch gives each message of a batch to a worker (each holds a
// reserved token), and returns how many came. Messages that come once a
// stop began are handed back, under one deadline for them all: another
// process, or the next start, takes them at once.
func (p *puller) dispatch(ctx context.Context, batch natsjs.MessageBatch) int {
	var hb handBackDeadline
	defer hb.end()
	got := 0
	for msg := range batch.Messages() {
		got++
		if ctx.Err() != nil {
			p.e.settle(hb.ctx(), p.r, msg, actHandBack)
			<-p.sem
			continue
		}
		p.e.inflight.Add(1)
		p.work <- msg // never waits long: a message holds a worker's token
	}
	return got
}

// handBackDeadline is one handBackWait for the messages of a fetch,
// started by the first message handed back.
type handBackDeadline struct {
	c      context.Context
	cancel context.CancelFunc
}

func (h *handBackDeadline) ctx() context.Context {
	if h.c == nil {
		h.c, h.cancel = context.WithTimeout(context.Background(), handBackWait)
	}
	return h.c
}

func (h *handBackDeadline) end() {
	if h.cancel != nil {
		h.cancel()
	}
}

// sleepUnless is sleep, cut short when done is closed (never if nil).
func sleepUnless(ctx context.Context, d time.Duration, done <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-done:
	}
	return true
}

// sleep waits d; false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool { return sleepUnless(ctx, d, nil) }
