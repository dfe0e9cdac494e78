// Package alert tells an operator's endpoint (alerts.url) what needs
// attention: a route's breaker opening or closing, dead letters appearing
// (batched per route, at most one notice per route per interval, with the
// count), and the outbox's oldest event passing a threshold (and coming
// back under it).
//
// A notice is a JSON POST signed as Standard Webhooks (webhook-id,
// webhook-timestamp, webhook-signature) with "type", "timestamp", "data"
// and a Slack-compatible "text". Notices wait in a bounded queue and are
// sent by one goroutine with a few retries and backoff: the pipeline that
// reports an event never waits, and a notice that finds the queue full or
// cannot be delivered is dropped and counted
// (hookgate_alerts_dropped_total). Neither the URL nor the secret is ever
// logged.
package alert

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/signature"
)

// Notice types.
const (
	TypeBreakerOpened   = "route.breaker_opened"
	TypeBreakerClosed   = "route.breaker_closed"
	TypeDeadLetters     = "route.dead_letters"
	TypeOutboxStalled   = "outbox.stalled"
	TypeOutboxRecovered = "outbox.recovered"
)

// Config configures an Alerter; zero values take the stated defaults.
type Config struct {
	// URL receives the notices. Required.
	URL string
	// Secret is the Standard Webhooks signing secret ("whsec_<base64>").
	// Required.
	Secret string
	// DeadLetterInterval is the least time between two dead-letter notices
	// of one route. Default 5m.
	DeadLetterInterval time.Duration
	// OutboxAge is the age of the oldest outbox event past which the outbox
	// is reported stalled; OutboxOldest reads that age (nil: not watched).
	OutboxAge    time.Duration
	OutboxOldest func(context.Context) (time.Duration, error)
	// Gateway names this gateway in every notice (e.g. the host name).
	Gateway string
	// UserAgent is sent with every notice. Default "hookgate/dev".
	UserAgent string
	// QueueSize is the most notices waiting to be sent. Default 256.
	QueueSize int
	// Retries after a failed attempt, RetryWaitMin and RetryWaitMax bound
	// the backoff between attempts, Timeout each attempt. Defaults 3, 1s,
	// 30s, 10s.
	Retries      int
	RetryWaitMin time.Duration
	RetryWaitMax time.Duration
	Timeout      time.Duration
	// Every is how often due dead-letter notices are sent and the outbox
	// is looked at. Default 1s.
	Every time.Duration
	// Now is the clock of batching and of the notices' timestamps (a
	// signature's is always time.Now). Default time.Now.
	Now func() time.Time
	// Transport sends the notices. Default http.DefaultTransport's clone,
	// without a proxy and reading at most 1 MiB of response headers.
	Transport http.RoundTripper
	// Registerer, if set, gets the alert metrics.
	Registerer prometheus.Registerer
}

// Notice is what is POSTed.
type Notice struct {
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	// Text is a one-line summary; Slack shows it as the message.
	Text string `json:"text"`
	Data Data   `json:"data"`
}

// Data is a notice's details; fields that do not apply are left out.
type Data struct {
	Gateway string `json:"gateway,omitempty"`
	Route   string `json:"route,omitempty"`
	// Failures is the run of failed rounds that opened a breaker.
	Failures int `json:"failures,omitempty"`
	// OpenUntil is when an opened breaker lets a probe through.
	OpenUntil time.Time `json:"open_until,omitzero"`
	// Reason a breaker closed: "probe_succeeded" or "resumed".
	Reason string `json:"reason,omitempty"`
	// Count of dead letters since the route's last notice.
	Count int `json:"count,omitempty"`
	// Since is when the first of them was reported.
	Since time.Time `json:"since,omitzero"`
	// OutboxAgeSeconds is the oldest outbox event's age; ThresholdSeconds
	// is alerts.outbox_age.
	OutboxAgeSeconds float64 `json:"outbox_age_seconds,omitempty"`
	ThresholdSeconds float64 `json:"threshold_seconds,omitempty"`
}

// Alerter sends notices. A nil *Alerter does nothing.
type Alerter struct {
	cfg    Config
	key    []byte
	client *retryablehttp.Client
	log    *slog.Logger
	queue  chan Notice

	mu      sync.Mutex
	dead    map[string]*deadLetters // by route
	stalled bool

	sent, failed prometheus.Counter
	droppedFull  prometheus.Counter

	sendCtx    context.Context // ends when Stop's ctx does
	cancelSend context.CancelFunc
	quit       chan struct{} // closed by Stop
	done       chan struct{} // closed when run returns
	started    bool
}

// deadLetters is a route's dead letters not yet reported.
type deadLetters struct {
	count    int
	since    time.Time // first unreported one
	lastSent time.Time // zero: never
}

// New returns an Alerter for cfg; Start runs it.
func New(cfg Config, log *slog.Logger) (*Alerter, error) {
	if u, err := url.Parse(cfg.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return nil, errors.New("alert: url must be an absolute http:// or https:// URL with a host")
	}
	key, err := signature.DecodeStandardSecret(cfg.Secret)
	if err != nil {
		return nil, fmt.Errorf("alert: secret: %w", err)
	}
	if cfg.DeadLetterInterval <= 0 {
		cfg.DeadLetterInterval = 5 * time.Minute
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "hookgate/dev"
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 256
	}
	if cfg.Retries < 0 {
		cfg.Retries = 0
	} else if cfg.Retries == 0 {
		cfg.Retries = 3
	}
	if cfg.RetryWaitMin <= 0 {
		cfg.RetryWaitMin = time.Second
	}
	if cfg.RetryWaitMax <= 0 {
		cfg.RetryWaitMax = 30 * time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Every <= 0 {
		cfg.Every = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.Proxy = nil
		t.MaxResponseHeaderBytes = 1 << 20 // net/http's default is 10 MiB
		cfg.Transport = t
	}
	a := &Alerter{cfg: cfg, key: key, log: log, queue: make(chan Notice, cfg.QueueSize),
		dead: map[string]*deadLetters{}, quit: make(chan struct{}), done: make(chan struct{})}
	a.client = &retryablehttp.Client{
		HTTPClient: &http.Client{
			Transport: cfg.Transport,
			Timeout:   cfg.Timeout,
			// A redirect is a failed attempt: the notice goes where configured.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		RetryWaitMin: cfg.RetryWaitMin,
		RetryWaitMax: cfg.RetryWaitMax,
		RetryMax:     cfg.Retries,
		CheckRetry:   checkRetry,
		Backoff:      boundedBackoff,
		// The last answer or error as it is: its text is logged without the URL.
		ErrorHandler: retryablehttp.PassthroughErrorHandler,
		// Each attempt is signed afresh: a retry carries a current timestamp.
		RequestLogHook: func(_ retryablehttp.Logger, req *http.Request, i int) { a.sign(req, i) },
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	a.sent = counter("hookgate_alerts_sent_total", "Alert notices delivered (a 2xx answer).")
	dropped := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hookgate_alerts_dropped_total",
		Help: "Alert notices dropped: queue_full, or undelivered after every retry."}, []string{"reason"})
	a.droppedFull, a.failed = dropped.WithLabelValues("queue_full"), dropped.WithLabelValues("undelivered")
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(a.sent, dropped)
	}
	return a, nil
}

// checkRetry retries connection errors, 408, 429 and 5xx; any other
// answer is final.
func checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if err != nil {
		return true, nil
	}
	s := resp.StatusCode
	return s == http.StatusRequestTimeout || s == http.StatusTooManyRequests || s >= 500, nil
}

// bodyKey carries a notice's body to sign.
type bodyKey struct{}

// sign sets the Standard Webhooks headers of attempt i.
func (a *Alerter) sign(req *http.Request, i int) {
	body, _ := req.Context().Value(bodyKey{}).([]byte)
	if i > 0 {
		// A retry is a shallow copy of the request before: the transport
		// may still read that attempt's header map.
		req.Header = req.Header.Clone()
	}
	now := time.Now() // the receiver checks it against its own clock
	req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	req.Header.Set("webhook-signature", signature.SignStandard(a.key, req.Header.Get("webhook-id"), now, body))
}

// Start runs the sender and the ticker until Stop.
func (a *Alerter) Start(ctx context.Context) error {
	if a == nil {
		return nil
	}
	a.sendCtx, a.cancelSend = context.WithCancel(context.WithoutCancel(ctx))
	a.started = true
	go a.run()
	return nil
}

// Stop sends the due dead-letter notices and what is queued until ctx
// ends (a send under way is cut short then); what is left is dropped.
func (a *Alerter) Stop(ctx context.Context) error {
	if a == nil || !a.started {
		return nil
	}
	a.Flush()
	close(a.quit)
	stopSends := context.AfterFunc(ctx, a.cancelSend)
	defer stopSends()
	<-a.done
	a.cancelSend()
	return nil
}

func (a *Alerter) run() {
	defer close(a.done)
	t := time.NewTicker(a.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-a.quit:
			for {
				select {
				case n := <-a.queue:
					if a.sendCtx.Err() != nil {
						a.failed.Inc()
						continue
					}
					a.send(a.sendCtx, n)
				default:
					return
				}
			}
		case n := <-a.queue:
			a.send(a.sendCtx, n)
		case <-t.C:
			a.Flush()
			a.checkOutbox(a.sendCtx)
		}
	}
}

// send delivers one notice with its retries.
func (a *Alerter) send(ctx context.Context, n Notice) {
	body, err := json.Marshal(n)
	if err != nil {
		a.failed.Inc()
		a.log.Error("alert notice not encoded", "type", n.Type, "err", err)
		return
	}
	req, err := retryablehttp.NewRequestWithContext(context.WithValue(ctx, bodyKey{}, body), http.MethodPost, a.cfg.URL, body)
	if err != nil {
		a.failed.Inc()
		a.log.Error("alert notice not sent: bad request", "type", n.Type)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", a.cfg.UserAgent)
	req.Header.Set("webhook-id", newID())
	resp, err := a.client.Do(req)
	if resp != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
	}
	// Logged before counted: whoever sees the count sees the log line.
	switch {
	case err != nil:
		a.log.Warn("alert notice not delivered", "type", n.Type, "route", n.Data.Route, "err", withoutURL(err))
		a.failed.Inc()
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		a.log.Warn("alert notice not delivered", "type", n.Type, "route", n.Data.Route, "status", resp.StatusCode)
		a.failed.Inc()
	default:
		a.sent.Inc()
	}
}

// withoutURL is err without the URL a *url.Error carries (it may hold a
// token, as Slack's webhook URLs do), at most maxErrorLogged bytes.
func withoutURL(err error) string {
	s := err.Error()
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		s = ue.Op + ": " + ue.Err.Error()
	}
	if len(s) <= maxErrorLogged {
		return s
	}
	cut := maxErrorLogged - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// maxErrorLogged bounds a failed notice's error text in the log: net/http
// quotes an endpoint's malformed answer whole.
const maxErrorLogged = 1 << 10

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "msg_" + hex.EncodeToString(b[:])
}

// enqueue queues n without waiting; a full queue drops it.
func (a *Alerter) enqueue(n Notice) {
	n.Data.Gateway = a.cfg.Gateway
	select {
	case a.queue <- n:
	default:
		a.droppedFull.Inc()
	}
}

// BreakerOpened reports that route's breaker opened after failures failed
// rounds, until a probe at until.
func (a *Alerter) BreakerOpened(route string, failures int, until time.Time) {
	if a == nil {
		return
	}
	now := a.cfg.Now()
	a.enqueue(Notice{Type: TypeBreakerOpened, Timestamp: now.UTC(),
		Text: fmt.Sprintf("hookgate%s: route %s paused: its breaker opened after %d failed rounds; a probe at %s",
			a.where(), route, failures, until.UTC().Format(time.RFC3339)),
		Data: Data{Route: route, Failures: failures, OpenUntil: until.UTC()}})
}

// BreakerClosed reports that route's breaker closed: a probe succeeded, or
// an operator resumed the route (resumed).
func (a *Alerter) BreakerClosed(route string, resumed bool) {
	if a == nil {
		return
	}
	reason, why := "probe_succeeded", "a probe succeeded"
	if resumed {
		reason, why = "resumed", "an operator resumed it"
	}
	a.enqueue(Notice{Type: TypeBreakerClosed, Timestamp: a.cfg.Now().UTC(),
		Text: fmt.Sprintf("hookgate%s: route %s delivering again: its breaker closed (%s)", a.where(), route, why),
		Data: Data{Route: route, Reason: reason}})
}

// Dead counts a dead letter of route; Flush reports it.
func (a *Alerter) Dead(route string) {
	if a == nil {
		return
	}
	now := a.cfg.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	d := a.dead[route]
	if d == nil {
		d = &deadLetters{}
		a.dead[route] = d
	}
	if d.count == 0 {
		d.since = now
	}
	d.count++
}

// Flush queues a notice for each route with unreported dead letters whose
// last notice is at least DeadLetterInterval old. The run loop calls it
// every Every.
func (a *Alerter) Flush() {
	if a == nil {
		return
	}
	now := a.cfg.Now()
	var out []Notice
	a.mu.Lock()
	for route, d := range a.dead {
		if d.count == 0 || (!d.lastSent.IsZero() && now.Sub(d.lastSent) < a.cfg.DeadLetterInterval) {
			continue
		}
		out = append(out, Notice{Type: TypeDeadLetters, Timestamp: now.UTC(),
			Text: fmt.Sprintf("hookgate%s: route %s: %d new dead %s since %s (GET /v1/deliveries?route=%s&state=dead)",
				a.where(), route, d.count, plural(d.count, "letter", "letters"), d.since.UTC().Format(time.RFC3339), route),
			Data: Data{Route: route, Count: d.count, Since: d.since.UTC()}})
		d.count, d.lastSent = 0, now
	}
	a.mu.Unlock()
	for _, n := range out {
		a.enqueue(n)
	}
}

// checkOutbox reports the outbox stalled when its oldest event passes
// OutboxAge, and recovered when it is back under.
func (a *Alerter) checkOutbox(ctx context.Context) {
	if a.cfg.OutboxOldest == nil || a.cfg.OutboxAge <= 0 {
		return
	}
	age, err := a.cfg.OutboxOldest(ctx)
	if err != nil {
		return // /readyz reports a store that cannot be read
	}
	a.OutboxAge(age)
}

// OutboxAge takes the oldest outbox event's age (0: empty) and reports a
// crossing of the threshold either way.
func (a *Alerter) OutboxAge(age time.Duration) {
	if a == nil {
		return
	}
	a.mu.Lock()
	was := a.stalled
	a.stalled = age > a.cfg.OutboxAge
	now := a.stalled
	a.mu.Unlock()
	data := Data{OutboxAgeSeconds: age.Seconds(), ThresholdSeconds: a.cfg.OutboxAge.Seconds()}
	switch {
	case now && !was:
		a.enqueue(Notice{Type: TypeOutboxStalled, Timestamp: a.cfg.Now().UTC(), Data: data,
			Text: fmt.Sprintf("hookgate%s: the outbox's oldest event has waited %s for JetStream (threshold %s): intake is not reaching the broker",
				a.where(), age.Round(time.Second), a.cfg.OutboxAge)})
	case was && !now:
		a.enqueue(Notice{Type: TypeOutboxRecovered, Timestamp: a.cfg.Now().UTC(), Data: data,
			Text: fmt.Sprintf("hookgate%s: the outbox is back under %s", a.where(), a.cfg.OutboxAge)})
	}
}

func (a *Alerter) where() string {
	if a.cfg.Gateway == "" {
		return ""
	}
	return " (" + a.cfg.Gateway + ")"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// boundedBackoff is retryablehttp's backoff with an endpoint's Retry-After
// (on 429 and 503, which DefaultBackoff takes as it is) bounded by
// RetryWaitMax: one sender goroutine sends every notice.
func boundedBackoff(minWait, maxWait time.Duration, attempt int, resp *http.Response) time.Duration {
	return min(retryablehttp.DefaultBackoff(minWait, maxWait, attempt, resp), maxWait)
}
