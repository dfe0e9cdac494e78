package outbound

import (
	"context"
	"errors"
	"sync"

	"github.com/hookgate/hookgate/store"
)

// RetryBatch retries the deliveries ids (API IDs) as Retry does, and
// returns once their rounds are over or ctx ends: a bulk retry goes batch
// by batch, never with more rounds of its own running than one batch. A
// delivery that is gone, succeeded or whose route is no longer configured
// is skipped (one that cannot be retried otherwise is logged and skipped).
// It returns how many rounds it started; the engine stopping, the store
// unavailable or ctx ending ends the batch with that error.
func (e *Engine) RetryBatch(ctx context.Context, ids []string) (int, error) {
	var done sync.WaitGroup
	n := 0
	var err error
	for _, id := range ids {
		_, rerr := e.retry(ctx, id, &done)
		switch {
		case rerr == nil:
			n++
			continue
		case errors.Is(rerr, ErrNotRunning), errors.Is(rerr, store.ErrUnavailable), ctx.Err() != nil:
			err = rerr
		case !errors.Is(rerr, store.ErrNotFound) && !errors.Is(rerr, ErrSucceeded) && !errors.Is(rerr, ErrUnknownRoute):
			e.log.Warn("bulk retry skipped a delivery", "delivery_id", id, "err", rerr)
		}
		if err != nil {
			break
		}
	}
	finished := make(chan struct{})
	go func() { done.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-ctx.Done():
		if err == nil {
			err = ctx.Err()
		}
	}
	return n, err
}
