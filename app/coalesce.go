package app

import (
	"sync"
	"time"
)

// coalesced runs run for its callers, one run at a time. A caller that
// comes while a run is in flight waits for the next one, which starts as
// that one ends and answers every caller that came meanwhile: any number
// of callers at once makes at most two runs. A caller waits at most wait
// (if set) for that next run; past it, it gets the run that was in flight when it
// came (ended by then when a run takes at most wait), so no caller waits
// much longer than one run. A run that panics panics in each of its
// callers' goroutines.
type coalesced[T any] struct {
	run  func() T
	wait time.Duration

	mu     sync.Mutex
	cur    *flight[T] // the run in flight
	next   *flight[T] // the run the callers that came during cur wait for
	queued int        // callers waiting for next
}

type flight[T any] struct {
	done     chan struct{}
	v        T
	panicked bool
	p        any // the run's panic, when panicked
}

func newFlight[T any]() *flight[T] { return &flight[T]{done: make(chan struct{})} }

// result is f's outcome, once done: its value, or its panic again.
func (f *flight[T]) result() T {
	if f.panicked {
		panic(f.p)
	}
	return f.v
}

func (c *coalesced[T]) get() T {
	c.mu.Lock()
	if c.cur == nil {
		f := newFlight[T]()
		c.cur = f
		c.mu.Unlock()
		c.fly(f)
		return f.result()
	}
	cur := c.cur
	if c.next == nil {
		c.next = newFlight[T]()
	}
	f := c.next
	c.queued++
	c.mu.Unlock()
	if c.wait <= 0 {
		<-f.done
		return f.result()
	}
	t := time.NewTimer(c.wait)
	defer t.Stop()
	select {
	case <-f.done:
		return f.result()
	case <-t.C:
	}
	select {
	case <-f.done:
		return f.result()
	case <-cur.done:
		return cur.result()
	}
}

// fly runs f, keeping its panic for its callers; the run callers queued
// for meanwhile then starts.
func (c *coalesced[T]) fly(f *flight[T]) {
	defer func() {
		if p := recover(); p != nil {
			f.panicked, f.p = true, p
		}
		c.mu.Lock()
		next := c.next
		c.cur, c.next, c.queued = next, nil, 0
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
