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
// is bounded by retry_wait_max.
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
	resp := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"3600"}}}
	if got := backoff(minWait, maxWait, 0, resp); got != maxWait {
		t.Errorf("429 with Retry-After 3600: waits %s, want %s", got, maxWait)
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
		got := cutError(tc.in)
		if got != tc.want || len(got) > maxErrorKept || !utf8.ValidString(got) {
			t.Errorf("%s: cutError = %d bytes %q…, want %d bytes", tc.name, len(got), got[:min(len(got), 20)], len(tc.want))
		}
	}
}
