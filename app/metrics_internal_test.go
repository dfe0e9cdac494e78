package app

import (
	"context"
	"errors"
	"testing"
)

// A gauge read from the store counts once per countCacheFor, however
// many scrapes come; a failed read keeps the last value.
func TestCachedCount(t *testing.T) {
	reads, n := 0, int64(3)
	var fail error
	c := &cachedCount{read: func(context.Context) (int64, error) { reads++; return n, fail }}
	for range 100 {
		if got := c.get(); got != 3 {
			t.Fatalf("get = %v, want 3", got)
		}
	}
	if reads != 1 {
		t.Fatalf("100 scrapes read the store %d times, want 1", reads)
	}
	c.at = c.at.Add(-countCacheFor) // the interval is over
	n, fail = 9, errors.New("busy")
	if got := c.get(); got != 3 || reads != 2 {
		t.Fatalf("after a failed read: %v (%d reads), want the last value 3 (2 reads)", got, reads)
	}
	c.at = c.at.Add(-countCacheFor)
	fail = nil
	if got := c.get(); got != 9 {
		t.Fatalf("get = %v, want 9", got)
	}
}
