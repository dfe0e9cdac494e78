package outbound

import (
	"context"
	"testing"
	"time"
)

// An operator's round waits for the running one; a message's does not.
func TestInflight(t *testing.T) {
	var f inflight
	k := eventKey(1)
	if !f.tryStart(k) {
		t.Fatal("tryStart on a free event failed")
	}
	if f.tryStart(k) {
		t.Fatal("tryStart on a running event succeeded")
	}
	if !f.tryStart(eventKey(2)) {
		t.Fatal("another event is not running")
	}
	started := make(chan bool)
	go func() { started <- f.start(context.Background(), k) }()
	// The waiter registers its channel; until done it stays blocked.
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.mu.Lock()
		waiting := f.m[k] != nil
		f.mu.Unlock()
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("start did not wait")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-started:
		t.Fatal("start returned while the event's round runs")
	default:
	}
	f.done(k)
	if !<-started {
		t.Fatal("start failed after done")
	}
	if f.tryStart(k) {
		t.Fatal("the waiter's round is running: tryStart must fail")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if f.start(ctx, k) {
		t.Fatal("start with an ended context succeeded while the event runs")
	}
	f.done(k)
	if !f.tryStart(k) {
		t.Fatal("tryStart after done failed")
	}
}
