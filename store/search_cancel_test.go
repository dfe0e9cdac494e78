package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// A search by a body field whose context ends stops there: go-sqlite3
// interrupts the running statement (sqlite3_interrupt), the search
// answers the context's error and its read connection is free again. The
// CPU the cancelled search used is compared with a whole one's (CPU, not
// wall-clock time: other processes on the machine do not count).
func TestSearchEventsInterrupted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	if err := openTest(t, path).Close(); err != nil {
		t.Fatal(err)
	}
	gatewaytest.FillEvents(t, path, "a", 10000, 30000, 1_700_000_000_000)
	s := openTest(t, path)
	f := EventSearch{FieldPath: "$.n", FieldValue: "no such value"}

	cpu := gatewaytest.CPUTime()
	evs, cut, err := s.SearchEvents(context.Background(), f)
	if err != nil || len(evs) != 0 || !cut {
		t.Fatalf("the whole search: %d events, cut %v, %v; want none, cut", len(evs), cut, err)
	}
	whole := gatewaytest.CPUTime() - cpu

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cpu = gatewaytest.CPUTime()
	go func() {
		_, _, err := s.SearchEvents(ctx, f)
		done <- err
	}()
	gatewaytest.WaitFor(t, "the search on a read connection", 30*time.Second, func() (bool, string) {
		n := s.r.Stats().InUse
		return n > 0, fmt.Sprint(n, " in use")
	})
	cancel()
	gatewaytest.WaitFor(t, "the search stopped", 30*time.Second, func() (bool, string) {
		select {
		case err = <-done:
			return true, ""
		default:
			return false, "running"
		}
	})
	cancelled := gatewaytest.CPUTime() - cpu
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrUnavailable) {
		t.Errorf("the cancelled search: %v; want context.Canceled (and ErrUnavailable)", err)
	}
	gatewaytest.WaitFor(t, "its read connection free", 30*time.Second, func() (bool, string) {
		n := s.r.Stats().InUse
		return n == 0, fmt.Sprint(n, " in use")
	})
	t.Logf("CPU: the whole search %s, the cancelled one %s", whole, cancelled)
	if cancelled > whole/2 {
		t.Errorf("the cancelled search used %s of CPU, the whole one %s: it ran on after its context ended", cancelled, whole)
	}
}
