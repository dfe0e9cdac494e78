package cluster

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestReleaseAgain(t *testing.T) {
	now := time.Now()
	unanswered := errors.New("nats: no response from stream")
	for _, tc := range []struct {
		name    string
		err     error
		outcome bool
		until   time.Time
		want    bool
	}{
		{"written", nil, true, now.Add(time.Minute), false},
		{"an outcome, the bucket not answering", unanswered, true, now.Add(time.Minute), true},
		{"an outcome, its writer not told yet", fmt.Errorf("cluster: write delivery state: %w", unanswered), true, now.Add(time.Second), true},
		{"no outcome: the lease ends by itself", unanswered, false, now.Add(time.Minute), false},
		{"the lease ended", unanswered, true, now, false},
		{"fenced", fmt.Errorf("release: %w", ErrFenced), true, now.Add(time.Minute), false},
	} {
		if got := releaseAgain(tc.err, tc.outcome, now, tc.until); got != tc.want {
			t.Errorf("%s: releaseAgain = %v, want %v", tc.name, got, tc.want)
		}
	}
}
