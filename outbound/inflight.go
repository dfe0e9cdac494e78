package outbound

import (
	"context"
	"sync"
)

// inflight marks the events a route runs a round for in this process, so
// that a second copy of a message (a re-publish after the stream's
// duplicate window, a redelivery after AckWait) or an operator's round
// never runs beside one already running for the same event. Its zero value
// is ready to use.
type inflight struct {
	mu sync.Mutex
	m  map[eventKey]chan struct{} // closed at done; made only when a round waits
}

// eventKey is an event's intake sequence (store.Event.Seq).
type eventKey int64

// tryStart marks k running and reports true, or reports false if a round
// for k already runs.
func (f *inflight) tryStart(k eventKey) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, busy := f.m[k]; busy {
		return false
	}
	if f.m == nil {
		f.m = map[eventKey]chan struct{}{}
	}
	f.m[k] = nil
	return true
}

// start waits until no round for k runs, then marks it running. It reports
// false if ctx ended first.
func (f *inflight) start(ctx context.Context, k eventKey) bool {
	for {
		f.mu.Lock()
		ch, busy := f.m[k]
		if !busy {
			if f.m == nil {
				f.m = map[eventKey]chan struct{}{}
			}
			f.m[k] = nil
			f.mu.Unlock()
			return true
		}
		if ch == nil {
			ch = make(chan struct{})
			f.m[k] = ch
		}
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// done marks k's round ended and wakes those waiting for it.
func (f *inflight) done(k eventKey) {
	f.mu.Lock()
	ch := f.m[k]
	delete(f.m, k)
	f.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}
