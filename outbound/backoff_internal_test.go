package outbound

import (
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// A quick retry waits within [max(retry_wait_min, d/2), d], d the doubled
// wait bounded by retry_wait_max; a downstream's Retry-After (429, 503)
// is honoured within [retry_wait_min, retry_wait_max].
func TestBackoffBounds(t *testing.T) {
	const minWait, maxWait = time.Second, 30 * time.Second
	for _, tc := range []struct {
		attempt int
		lo, hi  time.Duration
	}{
		{0, minWait, minWait},
		{1, minWait, 2 * time.Second},
		{2, 2 * time.Second, 4 * time.Second},
		{5, 15 * time.Second, maxWait},
		{40, 15 * time.Second, maxWait},
	} {
		for range 1000 {
			if got := backoff(minWait, maxWait, tc.attempt, nil); got < tc.lo || got > tc.hi {
				t.Fatalf("attempt %d: waits %s, want within [%s, %s]", tc.attempt, got, tc.lo, tc.hi)
			}
		}
	}
	for _, tc := range []struct {
		status     int
		retryAfter string
		want       time.Duration
	}{
		{http.StatusTooManyRequests, "3600", maxWait},
		{http.StatusTooManyRequests, "7", 7 * time.Second},
		{http.StatusTooManyRequests, "0", minWait},
		{http.StatusServiceUnavailable, "0", minWait},
		{http.StatusServiceUnavailable, "Wed, 21 Oct 2015 07:28:00 GMT", minWait},
	} {
		resp := &http.Response{StatusCode: tc.status, Header: http.Header{"Retry-After": {tc.retryAfter}}}
		if got := backoff(minWait, maxWait, 0, resp); got != tc.want {
			t.Errorf("%d with Retry-After %q: waits %s, want %s", tc.status, tc.retryAfter, got, tc.want)
		}
	}
}

func TestCutError(t *testing.T) {
	long := strings.Repeat("a", maxErrorKept-4) + "é" + "tail" // é at bytes 1020-1021, the cut at 1021
	for _, tc := range []struct {
		name, in string
		want     string
	}{
		{"short", "dial tcp: refused", "dial tcp: refused"},
		{"at the bound", strings.Repeat("x", maxErrorKept), strings.Repeat("x", maxErrorKept)},
		{"cut before a rune it would split", long, strings.Repeat("a", maxErrorKept-4) + "…"},
	} {
		got := cutError(tc.in, maxErrorKept)
		if got != tc.want || len(got) > maxErrorKept || !utf8.ValidString(got) {
			t.Errorf("%s: cutError = %d bytes %q…, want %d bytes", tc.name, len(got), got[:min(len(got), 20)], len(tc.want))
		}
	}
}
