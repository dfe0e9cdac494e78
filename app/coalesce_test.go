package app

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Callers that come while a run is in flight share the one run after it:
// 50 callers at once make two runs, and each gets a result of a run that
// started after it came.
func TestCoalescedRuns(t *testing.T) {
	var runs atomic.Int64
	release := make(chan struct{})
	c := &coalesced[int64]{run: func() int64 {
		n := runs.Add(1)
		if n == 1 {
			<-release
		}
		return n
	}}
	first := make(chan int64)
	go func() { first <- c.get() }()
	waitFor(t, "the first run in flight", func() (bool, string) { return runs.Load() == 1, fmt.Sprint(runs.Load()) })
	const n = 50
	got := make([]int64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { got[i] = c.get() })
	}
	waitFor(t, "every caller waiting", func() (bool, string) { return c.waiting() == n, fmt.Sprint(c.waiting()) })
	close(release)
	wg.Wait()
	if v := <-first; v != 1 {
		t.Errorf("first caller got run %d, want 1", v)
	}
	for i, v := range got {
		if v != 2 {
			t.Fatalf("caller %d got run %d, want 2 (the run after the one in flight when it came)", i, v)
		}
	}
	if r := runs.Load(); r != 2 {
		t.Fatalf("%d runs for %d callers, want 2", r, n+1)
	}
	// Alone, a caller starts its own run.
	if v := c.get(); v != 3 {
		t.Fatalf("a caller alone got run %d, want 3", v)
	}
}

// A run that panicked (recovered by the request's handler) does not leave
// the next caller waiting for good.
func TestCoalescedAfterPanic(t *testing.T) {
	n := 0
	c := &coalesced[int]{run: func() int {
		n++
		if n == 1 {
			panic("boom")
		}
		return n
	}}
	func() {
		defer func() { _ = recover() }()
		c.get()
	}()
	got := make(chan int, 1)
	go func() { got <- c.get() }()
	select {
	case v := <-got:
		if v != 2 {
			t.Errorf("the run after the panic answered %d, want 2", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the next caller still waits, 10 s after a run panicked")
	}
}

// A caller that comes while a run is in flight waits for the next run at
// most wait; then it gets the run that was in flight when it came.
func TestCoalescedWaitBounded(t *testing.T) {
	var runs atomic.Int64
	release, hang := make(chan struct{}), make(chan struct{})
	defer close(hang)
	c := &coalesced[int64]{wait: 50 * time.Millisecond, run: func() int64 {
		n := runs.Add(1)
		switch n {
		case 1:
			<-release
		case 2:
			<-hang // the next run does not answer in time
		}
		return n
	}}
	first := make(chan int64, 1)
	go func() { first <- c.get() }()
	waitFor(t, "the first run in flight", func() (bool, string) { return runs.Load() == 1, fmt.Sprint(runs.Load()) })
	second := make(chan int64, 1)
	go func() { second <- c.get() }()
	waitFor(t, "the second caller waiting", func() (bool, string) { return c.waiting() == 1, fmt.Sprint(c.waiting()) })
	close(release)
	if v := <-first; v != 1 {
		t.Fatalf("first caller got run %d, want 1", v)
	}
	var got int64
	waitFor(t, "the second caller answered while the next run hangs", func() (bool, string) {
		select {
		case got = <-second:
			return true, ""
		default:
			return false, fmt.Sprintf("%d runs", runs.Load())
		}
	})
	if got != 1 {
		t.Errorf("second caller got run %d, want 1 (the run in flight when it came)", got)
	}
}

// A run started for waiting callers that panics is their panic, in their
// goroutines: the process goes on, and no caller gets a zero answer.
func TestCoalescedWaitersGetPanic(t *testing.T) {
	var runs atomic.Int64
	release := make(chan struct{})
	c := &coalesced[int64]{wait: time.Minute, run: func() int64 {
		n := runs.Add(1)
		switch n {
		case 1:
			<-release
		case 2:
			panic("boom")
		}
		return n
	}}
	first := make(chan int64, 1)
	go func() { first <- c.get() }()
	waitFor(t, "the first run in flight", func() (bool, string) { return runs.Load() == 1, fmt.Sprint(runs.Load()) })
	const n = 3
	panics := make(chan any, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			defer func() { panics <- recover() }()
			c.get()
		})
	}
	waitFor(t, "every caller waiting", func() (bool, string) { return c.waiting() == n, fmt.Sprint(c.waiting()) })
	close(release)
	wg.Wait()
	close(panics)
	for v := range panics {
		if v != "boom" {
			t.Errorf("a waiter of the run that panicked got %v, want its panic", v)
		}
	}
	if v := c.get(); v != 3 {
		t.Errorf("a caller alone after the panic got run %d, want 3", v)
	}
}
