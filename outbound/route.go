package outbound

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/hookgate/hookgate/egress"
	"github.com/hookgate/hookgate/expr"
	"github.com/hookgate/hookgate/jetstream"
	"github.com/hookgate/hookgate/signature"
)

// route is one configured downstream, ready to deliver to.
type route struct {
	cfg      Route
	sources  map[string]bool
	signKey  []byte // nil: unsigned
	client   *http.Client
	limiter  *rate.Limiter // nil: unlimited
	consumer string        // durable consumer name
	subjects []string      // the consumer's filter subjects
	breaker  *breaker
	retry    *retryablehttp.Client // client with the round's retries and hooks
	filter   *expr.Program         // nil: none
	scopes   *scopeSlots           // the task route's rounds in flight per token; nil on others
	queued   *scopeSlots           // the task route's operators' rounds queued per token; nil on others
	// filterLogged is when a filter error was last logged (unix ns).
	filterLogged atomic.Int64
	// since is when the route was first configured (unix ms, 0: from the
	// start; loadSince).
	since atomic.Int64
	// takes is what the route took since when, oldest first (loadTakes).
	takes atomic.Pointer[[]takes]
}

// newRoute is route rc, its consumer on the events stream stream.
func newRoute(rc Route, stream string, transport http.RoundTripper) (*route, error) {
	rc = rc.withDefaults()
	r := &route{cfg: rc, sources: map[string]bool{}, consumer: "route_" + rc.Name,
		breaker: newBreaker(rc.BreakerThreshold, rc.BreakerCooldown)}
	for _, s := range rc.Sources {
		r.sources[s] = true
		r.subjects = append(r.subjects, jetstream.SourceFilter(stream, s))
	}
	if rc.Secret != "" {
		key, err := signature.DecodeStandardSecret(rc.Secret)
		if err != nil {
			return nil, fmt.Errorf("route %s: secret: %w", rc.Name, err)
		}
		r.signKey = key
	}
	if rc.Filter != "" {
		prg, err := expr.Compile(rc.Filter, expr.Bool, expr.Body|expr.Source|expr.Type)
		if err != nil {
			return nil, fmt.Errorf("route %s: filter: %w", rc.Name, err)
		}
		r.filter = prg
	}
	if rc.Rate > 0 {
		r.limiter = rate.NewLimiter(rate.Limit(rc.Rate), max(1, int(rc.Rate)))
	}
	if t, ok := transport.(*http.Transport); ok {
		// A pool of its own: go-retryablehttp closes its client's idle
		// connections after every round that failed, which would close
		// every route's. (A wrapper without CloseIdleConnections would
		// make net/http run a timer goroutine per request, and race its
		// timeout's error text.)
		t = t.Clone()
		if rc.Proxy != "" {
			u, err := egress.ParseProxy(rc.Proxy)
			if err != nil {
				return nil, fmt.Errorf("route %s: proxy: %w", rc.Name, err)
			}
			egress.UseProxy(t, u)
		}
		transport = t
	} else if rc.Proxy != "" {
		return nil, fmt.Errorf("route %s: a proxy needs an *http.Transport", rc.Name)
	}
	r.client = &http.Client{
		Transport: transport,
		Timeout:   rc.Timeout,
		// Redirects are not followed: a 3xx is a failed attempt.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return r, nil
}

// matches reports whether the route takes events of this source and type.
func (r *route) matches(source, eventType string) bool {
	if !r.sources[source] {
		return false
	}
	if len(r.cfg.Events) == 0 {
		return true
	}
	for _, g := range r.cfg.Events {
		if Glob(g, eventType) {
			return true
		}
	}
	return false
}

// Glob matches s against pattern, where '*' matches any run of characters
// (dots included) and every other character matches itself.
func Glob(pattern, s string) bool {
	// Iterative wildcard match with single backtrack point: O(len(p)*len(s)).
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// IdempotencyKey is the key every request for one (route, source, event)
// carries: derived from those three alone, so it is the same across
// retries, redeliveries, restarts and inbound duplicates, and different for
// different events or routes.
func IdempotencyKey(route, source, eventID string) string {
	// sha256 of "len:part" for each part, the first 16 bytes in hex.
	// Built in a stack buffer: this runs once per delivered message.
	var buf [256]byte
	b := buf[:0]
	for _, part := range [3]string{route, source, eventID} {
		b = strconv.AppendInt(b, int64(len(part)), 10)
		b = append(b, ':')
		b = append(b, part...)
	}
	sum := sha256.Sum256(b)
	var out [3 + 32]byte
	copy(out[:], "hg_")
	hex.Encode(out[3:], sum[:16])
	return string(out[:])
}

// waitForRate waits for the route's rate limiter, until ctx ends; ok is
// false if ctx ended first.
func (r *route) waitForRate(ctx context.Context) (ok bool) {
	if r.limiter == nil {
		return ctx.Err() == nil
	}
	res := r.limiter.Reserve()
	d := res.Delay()
	if d == 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		res.Cancel()
		return false
	}
}

// retryAfter parses a Retry-After header (seconds or an HTTP date).
func retryAfter(h string, now time.Time) (time.Duration, bool) {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0, false
	}
	var secs int64
	if _, err := fmt.Sscanf(h, "%d", &secs); err == nil && fmt.Sprint(secs) == h {
		if secs < 0 {
			return 0, false
		}
		return time.Duration(min(secs, 1<<30)) * time.Second, true
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// ctxKey carries a round's state to the retryablehttp hooks.
type ctxKey struct{}

func roundFrom(ctx context.Context) *roundState {
	st, _ := ctx.Value(ctxKey{}).(*roundState)
	return st
}
