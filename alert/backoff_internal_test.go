package alert

import (
	"net/http"
	"testing"
	"time"
)

// An endpoint's Retry-After is bounded by RetryWaitMax: obeyed as it is,
// "3600" held every later notice for an hour.
func TestBoundedBackoff(t *testing.T) {
	const minWait, maxWait = time.Second, 30 * time.Second
	for _, tc := range []struct {
		status     int
		retryAfter string
		want       time.Duration
	}{
		{http.StatusTooManyRequests, "3600", maxWait},
		{http.StatusServiceUnavailable, "3600", maxWait},
		{http.StatusTooManyRequests, "2", 2 * time.Second},
	} {
		resp := &http.Response{StatusCode: tc.status, Header: http.Header{"Retry-After": {tc.retryAfter}}}
		if got := boundedBackoff(minWait, maxWait, 0, resp); got != tc.want {
			t.Errorf("%d with Retry-After %s: waits %s, want %s", tc.status, tc.retryAfter, got, tc.want)
		}
	}
	for attempt := range 8 {
		if got := boundedBackoff(minWait, maxWait, attempt, nil); got < minWait || got > maxWait {
			t.Errorf("attempt %d: waits %s, want within [%s, %s]", attempt, got, minWait, maxWait)
		}
	}
}
