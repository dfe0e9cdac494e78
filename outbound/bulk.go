package outbound

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hookgate/hookgate/store"
)

// BulkRounds is the most rounds of one RetryBatch in flight at once.
const BulkRounds = DefaultConcurrency

// RetryBatch retries the deliveries ids (API IDs) as Retry does, at most
// BulkRounds rounds at once, and returns once their rounds are over or ctx
// ends: a bulk retry goes batch by batch. A delivery that is gone,
// succeeded, whose route is no longer configured or is paused, or that
// has a retry queued already is skipped (one that
// cannot be retried otherwise is logged and skipped; one refused for want
// of room among operators' rounds waits for it). It returns how many
// rounds it started; the engine stopping, the store unavailable or ctx
// ending ends the batch with that error.
func (e *Engine) RetryBatch(ctx context.Context, ids []string) (int, error) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, BulkRounds)
	n := 0
	var err error
	for _, id := range ids {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err != nil {
			break
		}
		wg.Add(1)
		_, rerr := e.retry(ctx, id, false, func() { <-slots; wg.Done() })
		for errors.Is(rerr, ErrBusy) && sleep(ctx, time.Second) { // room comes as rounds end
			_, rerr = e.retry(ctx, id, false, func() { <-slots; wg.Done() })
		}
		if rerr == nil {
			n++
			continue
		}
		<-slots
		wg.Done()
		switch {
		case errors.Is(rerr, ErrNotRunning), errors.Is(rerr, store.ErrUnavailable), ctx.Err() != nil:
			err = rerr
		case !errors.Is(rerr, store.ErrNotFound) && !errors.Is(rerr, ErrSucceeded) && !errors.Is(rerr, ErrUnknownRoute) &&
			!errors.Is(rerr, ErrRoundQueued) && !errors.Is(rerr, ErrRoutePaused):
			e.log.Warn("bulk retry skipped a delivery", "delivery_id", id, "err", rerr)
		}
		if err != nil {
			break
		}
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-ctx.Done():
		if err == nil {
			err = ctx.Err()
		}
	}
	return n, err
}
