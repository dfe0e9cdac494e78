package outbound

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-retryablehttp"
	"golang.org/x/net/http/httpguts"

	"github.com/hookgate/hookgate/signature"
	"github.com/hookgate/hookgate/store"
)

// maxResponseKept is how much of each response body an attempt records.
const maxResponseKept = 2 << 10

var responsePool = sync.Pool{New: func() any { return new([maxResponseKept]byte) }}

// roundState collects the attempts of one round for the retryablehttp hooks.
type roundState struct {
	r        *route
	key      string
	body     []byte
	base     int // attempts made before this round
	start    time.Time
	attempts []store.Attempt
	// unsent: the round ended while waiting for the route's rate; the
	// attempt that follows fails unsent and is not recorded.
	unsent bool
}

func (e *Engine) httpClient(r *route) *retryablehttp.Client {
	return &retryablehttp.Client{
		HTTPClient:     r.client,
		RetryMax:       r.cfg.Retries,
		RetryWaitMin:   r.cfg.RetryWaitMin,
		RetryWaitMax:   r.cfg.RetryWaitMax,
		CheckRetry:     checkRetry,
		Backoff:        backoff,
		ErrorHandler:   retryablehttp.PassthroughErrorHandler,
		RequestLogHook: e.beforeAttempt,
	}
}

// beforeAttempt waits for the route's rate limiter, then stamps each
// attempt: its number and, on a signed route, a fresh timestamp and
// signature.
func (e *Engine) beforeAttempt(_ retryablehttp.Logger, req *http.Request, i int) {
	st := roundFrom(req.Context())
	if st == nil {
		return
	}
	if i > 0 {
		// A retry is a shallow copy of the request before: the transport
		// may still read that attempt's header map.
		req.Header = req.Header.Clone()
	}
	// Before the attempt's timeout starts: waiting for the route's rate
	// is not the downstream's time.
	st.unsent = !st.r.waitForRate(req.Context())
	now := time.Now()
	setHeader(req.Header, "X-Hookgate-Attempt", strconv.Itoa(st.base+i+1))
	if st.r.signKey != nil {
		setHeader(req.Header, "Webhook-Timestamp", strconv.FormatInt(now.Unix(), 10))
		setHeader(req.Header, "Webhook-Signature", signature.SignStandard(st.r.signKey, st.key, now, st.body))
	}
	st.start = now
}

// setHeader sets h's one value of canonicalKey in place if it has one
// (request made room for it), else as Header.Set. In place is safe: a
// retry's header is a copy of its own (beforeAttempt).
func setHeader(h http.Header, canonicalKey, v string) {
	if vs := h[canonicalKey]; len(vs) == 1 {
		vs[0] = v
		return
	}
	h[canonicalKey] = []string{v}
}

// checkRetry records the attempt and decides: 2xx succeeded and 410 Gone
// are final; every other status, a redirect, a timeout or a connection
// error is retried.
func checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	st := roundFrom(ctx)
	if st != nil && !st.unsent {
		a := store.Attempt{StartedAt: st.start, Duration: time.Since(st.start)}
		if err != nil {
			a.Error = cutError(transportError(err), maxErrorKept)
		} else {
			a.Status = resp.StatusCode
			// Read into pooled scratch; keep a copy of only what came (most
			// answers are a few bytes, or none).
			buf := responsePool.Get().(*[maxResponseKept]byte)
			n, _ := io.ReadFull(resp.Body, buf[:])
			a.Response = append(make([]byte, 0, n), buf[:n]...) // non-nil, as before
			responsePool.Put(buf)
			if resp.StatusCode >= 300 && resp.StatusCode < 400 {
				a.Error = cutError("redirect not followed: "+redactURL(resp.Header.Get("Location")), maxErrorKept)
			}
		}
		st.attempts = append(st.attempts, a)
	}
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if err != nil {
		return true, nil
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 || resp.StatusCode == http.StatusGone {
		return false, nil
	}
	return true, nil
}

// transportError is err's text with the URL it quotes cut to its scheme
// and host: a downstream URL often carries a secret in its path or query
// (e.g. https://hooks.example.com/services/T0/B0/secret), and the text is
// logged and kept in delivery records.
func transportError(err error) string {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err.Error()
	}
	return ue.Op + " " + redactURL(ue.URL) + ": " + ue.Err.Error()
}

// maxErrorKept bounds the error text an attempt records, and so its
// delivery's last_error and log lines: net/http quotes a malformed answer
// whole (a status line up to the response header limit, escaped), and a
// redirect's host is the downstream's.
const maxErrorKept = 1 << 10

// cutError is s cut to at most limit bytes (maxErrorKept, or a filter's
// maxFilterErrLen), on a rune boundary, "…" marking the cut.
func cutError(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// redactURL is a URL cut to its scheme and host ("scheme://host/…"), or a
// placeholder when it has no host.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.Host != "" {
		return u.Scheme + "://" + u.Host + "/…"
	}
	if s == "" {
		return ""
	}
	return "(a URL without a host)"
}

// checkHeader returns the error net/http's client would give for h: a
// header it cannot send. It names the header, never its value (a route's
// headers may hold a secret).
func checkHeader(h http.Header) error {
	for k, vs := range h {
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("invalid header field name %q", k)
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Errorf("invalid header field value for %q", k)
			}
		}
	}
	return nil
}

// backoff is jittered exponential between min and max; a Retry-After on a
// 429 or 503 is honoured within [min, max], so "Retry-After: 0" or a past
// date is no tight loop.
func backoff(minWait, maxWait time.Duration, attempt int, resp *http.Response) time.Duration {
	if resp != nil && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) {
		if d, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return min(max(d, minWait), maxWait)
		}
	}
	d := minWait << min(attempt, 30)
	if d <= 0 || d > maxWait {
		d = maxWait
	}
	// Jitter over the upper half, [d/2, d], never below minWait.
	lo := max(minWait, d/2)
	if lo >= d {
		return lo
	}
	return lo + rand.N(d-lo+1)
}

// round delivers ev to r: a few quick attempts, then the outcome is
// recorded, as decide says. prev is the delivery as stored (zero if none);
// manual rounds (an operator's retry or replay) do not advance the long
// schedule.
func (e *Engine) round(ctx context.Context, r *route, ev envelope, prev store.DeliveryStatus, manual bool) decision {
	key := IdempotencyKey(r.cfg.Name, ev.source, ev.id)
	res, attempts := e.send(ctx, r, ev, key, prev.Attempts)
	dec := decide(prev, res, r.cfg.Schedule, time.Now(), manual)
	if !dec.record {
		return dec
	}
	d := &store.Delivery{EventSeq: ev.seq, Route: r.cfg.Name, Source: ev.source, EventID: ev.id, EventType: ev.typ,
		IdempotencyKey: key, State: dec.next.state, Rounds: dec.next.rounds, NextAttemptAt: dec.next.nextAttemptAt,
		LastStatus: dec.next.lastStatus, LastError: dec.next.lastError}
	if err := e.state.Record(context.WithoutCancel(ctx), d, attempts); err != nil {
		e.log.Error("cannot record delivery round; it will run again", "route", r.cfg.Name,
			"source", ev.source, "event_id", ev.id, "err", err)
		return dec.unrecorded(res.stopped)
	}
	e.report(r, ev, d, dec.outcome, attempts)
	return dec
}

// send makes a round's requests: what they came to, and each attempt, to
// be recorded. before is the number of attempts of earlier rounds.
func (e *Engine) send(ctx context.Context, r *route, ev envelope, key string, before int) (roundResult, []store.Attempt) {
	st := &roundState{r: r, key: key, body: ev.body, base: before}
	req, err := e.request(context.WithValue(ctx, ctxKey{}, st), r, ev, key)
	if err != nil {
		// No attempt can ever send it (e.g. an event stored with a control
		// character in its type): one attempt records why.
		a := store.Attempt{StartedAt: time.Now(), Error: cutError("cannot build request: "+transportError(err), maxErrorKept)}
		return roundResult{attempts: 1, last: a, unsendable: true, stopped: ctx.Err() != nil}, []store.Attempt{a}
	}
	resp, err := r.retry.Do(req)
	if resp != nil {
		drain(resp.Body)
		_ = resp.Body.Close()
	}
	res := roundResult{attempts: len(st.attempts), stopped: ctx.Err() != nil}
	if n := len(st.attempts); n > 0 {
		res.last = st.attempts[n-1]
	}
	if err != nil {
		res.err = cutError(transportError(err), maxErrorKept)
	}
	return res, st.attempts
}

// gatewayHeaders is the most headers request and beforeAttempt set.
const gatewayHeaders = 10

// drain reads what is left of a response, at most 64 KiB, so that its
// connection is used again.
func drain(body io.Reader) {
	buf := responsePool.Get().(*[maxResponseKept]byte)
	for range (64 << 10) / maxResponseKept {
		if _, err := io.ReadFull(body, buf[:]); err != nil {
			break
		}
	}
	responsePool.Put(buf)
}

// request is ev's request to r, or why net/http could not send it.
func (e *Engine) request(ctx context.Context, r *route, ev envelope, key string) (*retryablehttp.Request, error) {
	url, method := r.cfg.URL, http.MethodPost
	if ev.url != "" {
		url = ev.url
	}
	if ev.method != "" {
		method = ev.method
	}
	req, err := retryablehttp.NewRequestWithContext(ctx, method, url, ev.body)
	if err != nil {
		return nil, err
	}
	// A map sized for every header, and one array for the values the
	// gateway sets (Header.Set makes a slice per value), the attempt's
	// own three included (beforeAttempt writes them in place).
	n := gatewayHeaders
	if r.signKey == nil {
		n -= 3
	}
	h := make(http.Header, len(ev.headers)+len(r.cfg.Headers)+n) // at most 8: one group, one allocation

	req.Header = h
	for k, v := range ev.headers {
		h.Set(k, v)
	}
	for k, v := range r.cfg.Headers {
		h.Set(k, v)
	}
	vals := make([]string, 0, n)
	set := func(canonicalKey, v string) {
		vals = append(vals, v)
		h[canonicalKey] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	ct := ev.contentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	set("Content-Type", ct)
	if ev.idempotencyKey != "" {
		set("Idempotency-Key", ev.idempotencyKey) // a task's own; records keep the derived key
	} else {
		set("Idempotency-Key", key)
	}
	set("User-Agent", e.cfg.UserAgent)
	set("X-Hookgate-Source", ev.source)
	set("X-Hookgate-Event-Id", ev.id)
	set("X-Hookgate-Event-Type", ev.typ)
	set("X-Hookgate-Attempt", "")
	if r.signKey != nil {
		set("Webhook-Id", key)
		set("Webhook-Timestamp", "")
		set("Webhook-Signature", "")
	}
	return req, checkHeader(h)
}

// report counts a recorded round and logs it.
func (e *Engine) report(r *route, ev envelope, d *store.Delivery, outcome string, attempts []store.Attempt) {
	e.cfg.Metrics.round(r.cfg.Name, outcome, attempts)
	switch outcome {
	case outcomeDead:
		if e.cfg.Alerts != nil {
			e.cfg.Alerts.Dead(r.cfg.Name)
		}
		e.log.Warn("delivery dead", "route", r.cfg.Name, "source", ev.source, "event_id", ev.id,
			"attempts", d.Attempts, "last_status", d.LastStatus, "last_error", d.LastError, "delivery_id", store.DeliveryUID(d.Route, d.Source, d.EventID))
	case outcomeRetrying, outcomeFailed:
		e.log.Info("delivery round failed", "route", r.cfg.Name, "source", ev.source, "event_id", ev.id,
			"attempts", d.Attempts, "last_status", d.LastStatus, "last_error", d.LastError, "next_attempt_at", d.NextAttemptAt)
	case outcomeSucceeded:
		e.log.Debug("delivered", "route", r.cfg.Name, "source", ev.source, "event_id", ev.id, "attempts", d.Attempts)
	}
}
