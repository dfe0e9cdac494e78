package startstop

import (
	"context"
	"sync/atomic"
	"testing"
)

func TestLoop(t *testing.T) {
	var l Loop
	l.Stop() // before Start: nothing to do

	var runs, ended atomic.Int32
	run := func(ctx context.Context) {
		runs.Add(1)
		<-ctx.Done()
		ended.Add(1)
	}
	l.Start(context.Background(), run)
	l.Start(context.Background(), run) // running: nothing to do
	l.Stop()
	if runs.Load() != 1 || ended.Load() != 1 {
		t.Fatalf("after Start twice and Stop: %d runs, %d ended; want 1 and 1", runs.Load(), ended.Load())
	}
	l.Stop() // twice: nothing to do

	l.Start(context.Background(), run) // a stopped loop starts anew
	l.Stop()
	if runs.Load() != 2 || ended.Load() != 2 {
		t.Fatalf("after a restart: %d runs, %d ended; want 2 and 2", runs.Load(), ended.Load())
	}
}
