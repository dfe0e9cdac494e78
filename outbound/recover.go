package outbound

import (
	"context"
	"fmt"
	"time"

	"github.com/hookgate/hookgate/store"
)

// metaStreamCreated records which incarnation of the stream the stored
// stream sequences refer to.
const metaStreamCreated = "stream_created"

// Recover puts back in the outbox every published event the stream has
// lost and some matching route has not finished with: all of them when the
// stream was created anew (its store wiped, or deleted on an external
// server), else those whose stream sequence is past the stream's last (a
// tail lost inside the fsync interval). It also puts back the event of
// every pending delivery of a configured route, so that an operator's
// retry or replay cut short by a stop or a crash runs again. Call it
// before the relay starts. Stable Idempotency-Keys make the re-delivery
// safe.
func (e *Engine) Recover(ctx context.Context) (int, error) {
	if err := e.broker.EnsureStream(ctx); err != nil {
		return 0, err
	}
	s, err := e.broker.JetStream().Stream(ctx, e.broker.Stream())
	if err != nil {
		return 0, fmt.Errorf("stream info: %w", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("stream info: %w", err)
	}
	created := info.Created.UTC().Format(time.RFC3339Nano)
	known, err := e.store.Meta(ctx, metaStreamCreated)
	if err != nil {
		return 0, err
	}
	minSeq := int64(info.State.LastSeq)
	if known != created {
		minSeq = -1 // a new stream: it holds none of what was published before
	}
	sources := make(map[string][]string, len(e.routes))
	for _, r := range e.routes {
		sources[r.cfg.Name] = r.cfg.Sources
	}
	var requeue []int64
	err = e.store.PublishedSince(ctx, minSeq, sources, func(ev *store.Event, terminal map[string]bool) error {
		for _, r := range e.routes {
			if r.matches(ev.Source, ev.Type) && !terminal[r.cfg.Name] {
				requeue = append(requeue, ev.Seq)
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	lost := len(requeue)
	// A pending delivery is one an operator's retry or replay left
	// unfinished (the gateway stopped or died during its round), or one
	// whose message is still in the stream. Its event goes back in the
	// outbox either way: a second copy of a message is harmless (the
	// engine reads the delivery's state before each round).
	err = e.store.PendingDeliveries(ctx, func(seq int64, route, source, eventType string) error {
		if r := e.byName[route]; r != nil && r.matches(source, eventType) {
			requeue = append(requeue, seq)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if err := e.store.Requeue(ctx, requeue); err != nil {
		return 0, err
	}
	if err := e.store.SetMeta(ctx, metaStreamCreated, created); err != nil {
		return 0, err
	}
	if lost > 0 {
		e.log.Warn("stream lost undelivered events; publishing them again", "events", lost,
			"stream_recreated", known != "" && known != created)
	}
	if n := len(requeue) - lost; n > 0 {
		e.log.Info("pending deliveries at start (an unfinished retry or replay, or a round cut short); publishing their events again", "deliveries", n)
	}
	return len(requeue), nil
}
