package app

import "sync"

// coalesced runs run for its callers, one run at a time. A caller that
// comes while a run is in flight waits for the next one, which starts as
// that one ends and answers every caller that came meanwhile. Each caller
// so gets the result of a run that started after it came, and any number
// of callers at once makes at most two runs.
type coalesced[T any] struct {
	run func() T

	mu     sync.Mutex
	flying bool
	next   *flight[T] // the run the callers that came during the one in flight wait for
	queued int        // callers waiting for next
}

type flight[T any] struct {
	done chan struct{}
	v    T
}

func (c *coalesced[T]) get() T {
	c.mu.Lock()
	if !c.flying {
		c.flying = true
		c.mu.Unlock()
		f := &flight[T]{done: make(chan struct{})}
		c.fly(f)
		return f.v
	}
	if c.next == nil {
		c.next = &flight[T]{done: make(chan struct{})}
	}
	f := c.next
	c.queued++
	c.mu.Unlock()
	<-f.done
	return f.v
}

// fly runs f; the run callers queued for meanwhile then starts, also
// after a run that panicked (its callers get the zero value; the caller
// that ran it gets the panic).
func (c *coalesced[T]) fly(f *flight[T]) {
	defer func() {
		c.mu.Lock()
		next := c.next
		c.next, c.queued, c.flying = nil, 0, next != nil
		c.mu.Unlock()
		close(f.done)
		if next != nil {
			go c.fly(next)
		}
	}()
	f.v = c.run()
}

// waiting is the number of callers waiting for the next run.
func (c *coalesced[T]) waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.queued
}
