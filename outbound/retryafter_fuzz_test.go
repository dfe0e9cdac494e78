package outbound

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

// FuzzRetryAfter: whatever a downstream's Retry-After holds, the wait is
// never negative and never beyond retry_wait_max; a plain number of
// seconds is that many seconds.
func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"120", "0", "-1", "+5", " 7 ", "1e3", "99999999999999999999",
		"Wed, 21 Oct 2015 07:28:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT", "Monday, 02-Jan-06 15:04:05 MST",
		"Mon Jan  2 15:04:05 2006", "", "\x00", "3\r\n"} {
		f.Add(s)
	}
	const minWait, maxWait = time.Second, 30 * time.Second
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := retryAfter(s, now)
		if ok && d < 0 {
			t.Fatalf("retryAfter(%q) = %s", s, d)
		}
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 && strconv.FormatInt(n, 10) == s {
			if want := time.Duration(min(n, 1<<30)) * time.Second; !ok || d != want {
				t.Fatalf("retryAfter(%q) = %s, %v; want %s", s, d, ok, want)
			}
		}
		for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
			resp := &http.Response{StatusCode: status, Header: http.Header{"Retry-After": {s}}}
			if w := backoff(minWait, maxWait, 0, resp); w < minWait || w > maxWait {
				t.Fatalf("%d with Retry-After %q: waits %s, want within [%s, %s]", status, s, w, minWait, maxWait)
			}
		}
	})
}
