package store

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// A claim under a context without a deadline that finds the write queue
// full waits at most claimQueueWait for room, then fails with
// context.DeadlineExceeded; claims that find room wait for no timer.
func TestClaimGivesUpOnFullQueue(t *testing.T) {
	s := openTest(t, "")
	old := claimQueueWait
	claimQueueWait = 50 * time.Millisecond
	t.Cleanup(func() { claimQueueWait = old })

	// Hold the writer in one op, then fill its queue.
	release := make(chan struct{})
	held := make(chan struct{})
	go s.writeOp(context.Background(), func(*sql.Tx) error { close(held); <-release; return nil }, leavesOutbox)
	<-held
	defer close(release)
	for range cap(s.ops) {
		go s.writeOp(context.Background(), func(*sql.Tx) error { return nil }, leavesOutbox)
	}
	gatewaytest.WaitFor(t, "a full write queue", 10*time.Second, func() (bool, string) {
		return len(s.ops) == cap(s.ops), ""
	})

	done := make(chan error, 1)
	go func() {
		_, err := s.Claim(context.Background(), &Event{Source: "s", ID: "evt_full", Type: "t", Body: []byte("{}"), ReceivedAt: time.Now()})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("claim on a full queue: %v, want context.DeadlineExceeded", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a claim on a full queue still waits after 10s")
	}
}
