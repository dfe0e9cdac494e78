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

// beforeAttempt stamps each attempt: its number and, on a signed route, a
// fresh timestamp and signature.
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
	now := time.Now()
	req.Header.Set("X-Hookgate-Attempt", strconv.Itoa(st.base+i+1))
	if st.r.signKey != nil {
		req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
		req.Header.Set("webhook-signature", signature.SignStandard(st.r.signKey, st.key, now, st.body))
	}
	st.start = now
}

// checkRetry records the attempt and decides: 2xx succeeded and 410 Gone
// are final; every other status, a redirect, a timeout or a connection
// error is retried.
func checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	st := roundFrom(ctx)
	if st != nil {
		a := store.Attempt{StartedAt: st.start, Duration: time.Since(st.start)}
		if err != nil {
			a.Error = transportError(err)
		} else {
			a.Status = resp.StatusCode
			// Read into pooled scratch; keep a copy of only what came (most
			// answers are a few bytes, or none).
			buf := responsePool.Get().(*[maxResponseKept]byte)
			n, _ := io.ReadFull(resp.Body, buf[:])
			a.Response = append(make([]byte, 0, n), buf[:n]...) // non-nil, as before
			responsePool.Put(buf)
			if resp.StatusCode >= 300 && resp.StatusCode < 400 {
				a.Error = "redirect not followed: " + redactURL(resp.Header.Get("Location"))
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
// 429 or 503 is honoured but never beyond max.
func backoff(minWait, maxWait time.Duration, attempt int, resp *http.Response) time.Duration {
	if resp != nil && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) {
		if d, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return min(d, maxWait)
		}
	}
	d := minWait << min(attempt, 30)
	if d <= 0 || d > maxWait {
		d = maxWait
	}
	// Full jitter over the upper half: [d/2, d].
	return d/2 + rand.N(d/2+1)
}

// round delivers one event to one route: a few quick attempts, then the
// outcome is recorded. prev is the delivery as stored (zero if none). It
// returns the recorded delivery, or nil when the round was cut short by a
// stop or could not be recorded (the caller hands the message back).
// manual rounds (operator retries) do not advance the long schedule.
func (e *Engine) round(ctx context.Context, r *route, ev envelope, prev store.DeliveryStatus, manual bool) *store.Delivery {
	key := IdempotencyKey(r.cfg.Name, ev.source, ev.id)
	st := &roundState{r: r, key: key, body: ev.body, base: prev.Attempts}
	d := &store.Delivery{EventSeq: ev.seq, Route: r.cfg.Name, Source: ev.source, EventID: ev.id, EventType: ev.typ,
		IdempotencyKey: key, State: store.StatePending, Rounds: prev.Rounds, NextAttemptAt: prev.NextAttemptAt}
	if prev.State != "" { // a delivery is stored
		d.State = prev.State
	}

	url, method := r.cfg.URL.Reveal(), http.MethodPost
	if ev.url != "" {
		url = ev.url
	}
	if ev.method != "" {
		method = ev.method
	}
	req, buildErr := retryablehttp.NewRequestWithContext(context.WithValue(ctx, ctxKey{}, st), method, url, ev.body)
	if buildErr == nil {
		h := req.Header
		for k, v := range ev.headers {
			h.Set(k, v)
		}
		for k, v := range r.cfg.Headers {
			h.Set(k, v)
		}
		ct := ev.contentType
		if ct == "" {
			ct = "application/octet-stream"
		}
		h.Set("Content-Type", ct)
		h.Set("Idempotency-Key", key)
		h.Set("User-Agent", e.cfg.UserAgent)
		h.Set("X-Hookgate-Source", ev.source)
		h.Set("X-Hookgate-Event-Id", ev.id)
		h.Set("X-Hookgate-Event-Type", ev.typ)
		if r.signKey != nil {
			h.Set("webhook-id", key)
		}
		buildErr = checkHeader(h)
	}

	var resp *http.Response
	var err error
	if buildErr != nil {
		// No attempt can ever send it (e.g. an event stored with a control
		// character in its type): one attempt records why, and the
		// delivery is dead below.
		st.attempts = append(st.attempts, store.Attempt{StartedAt: time.Now(),
			Error: "cannot build request: " + transportError(buildErr)})
	} else {
		resp, err = r.retry.Do(req)
	}
	if resp != nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
	}
	stopped := ctx.Err() != nil
	now := time.Now()
	var last store.Attempt
	if n := len(st.attempts); n > 0 {
		last = st.attempts[n-1]
	}
	d.LastStatus, d.LastError = last.Status, last.Error
	if d.LastError == "" && last.Status != 0 && (last.Status < 200 || last.Status >= 300) {
		d.LastError = http.StatusText(last.Status)
	}
	if d.LastError == "" && err != nil && !stopped {
		d.LastError = transportError(err)
	}
	outcome := ""
	switch {
	case buildErr != nil:
		d.State, d.NextAttemptAt = store.StateDead, time.Time{}
		outcome = "dead"
	case last.Status >= 200 && last.Status < 300:
		d.State, d.NextAttemptAt, d.LastError = store.StateSucceeded, time.Time{}, ""
		outcome = "succeeded"
	case last.Status == http.StatusGone:
		d.State, d.NextAttemptAt = store.StateDead, time.Time{}
		outcome = "dead"
	case stopped:
		// Keep the state; the message is handed back.
		if len(st.attempts) == 0 {
			return nil
		}
		if manual {
			// An operator's retry or replay stays pending: the next start
			// puts its event back in the outbox (Engine.Recover).
			d.State, d.NextAttemptAt = store.StatePending, time.Time{}
		}
	case manual:
		// An operator's round leaves the state and schedule where they were.
		outcome = "failed"
	default:
		d.Rounds++
		if d.Rounds > len(r.cfg.Schedule) {
			d.State, d.NextAttemptAt = store.StateDead, time.Time{}
			outcome = "dead"
		} else {
			d.State = store.StateRetrying
			d.NextAttemptAt = now.Add(r.cfg.Schedule[d.Rounds-1])
			outcome = "retrying"
		}
	}
	if err := e.store.RecordRound(context.WithoutCancel(ctx), d, st.attempts); err != nil {
		e.log.Error("cannot record delivery round; it will run again", "route", r.cfg.Name,
			"source", ev.source, "event_id", ev.id, "err", err)
		return nil
	}
	e.cfg.Metrics.round(r.cfg.Name, outcome, st.attempts)
	switch outcome {
	case "dead":
		e.log.Warn("delivery dead", "route", r.cfg.Name, "source", ev.source, "event_id", ev.id,
			"attempts", d.Attempts, "last_status", d.LastStatus, "last_error", d.LastError, "delivery_id", d.ID)
	case "retrying", "failed":
		e.log.Info("delivery round failed", "route", r.cfg.Name, "source", ev.source, "event_id", ev.id,
			"attempts", d.Attempts, "last_status", d.LastStatus, "last_error", d.LastError, "next_attempt_at", d.NextAttemptAt)
	case "succeeded":
		e.log.Debug("delivered", "route", r.cfg.Name, "source", ev.source, "event_id", ev.id, "attempts", d.Attempts)
	}
	if stopped {
		return nil
	}
	return d
}
