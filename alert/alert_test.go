package alert_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hookgate/hookgate/alert"
	"github.com/hookgate/hookgate/internal/gatewaytest"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// receiver is an alerts.url that verifies each notice with the Standard
// Webhooks library and keeps those that verify.
type receiver struct {
	srv     *httptest.Server
	mu      sync.Mutex
	notices []alert.Notice
	bad     []string
	status  atomic.Int32 // answer; 0: 204
	calls   atomic.Int32
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.calls.Add(1)
		body, _ := io.ReadAll(req.Body)
		if s := r.status.Load(); s != 0 {
			w.WriteHeader(int(s))
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if err := wh.Verify(body, req.Header); err != nil {
			r.bad = append(r.bad, "verify: "+err.Error())
		} else if req.Header.Get("Content-Type") != "application/json" || !strings.HasPrefix(req.Header.Get("User-Agent"), "hookgate/") {
			r.bad = append(r.bad, "headers: "+req.Header.Get("Content-Type")+" "+req.Header.Get("User-Agent"))
		}
		var n alert.Notice
		if err := json.Unmarshal(body, &n); err != nil {
			r.bad = append(r.bad, "json: "+err.Error())
		}
		r.notices = append(r.notices, n)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// wait returns the notices once there are n, failing after a deadline.
func (r *receiver) wait(t *testing.T, n int) []alert.Notice {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r.mu.Lock()
		got, bad := append([]alert.Notice(nil), r.notices...), append([]string(nil), r.bad...)
		r.mu.Unlock()
		if len(bad) > 0 {
			t.Fatalf("bad notices: %v", bad)
		}
		if len(got) >= n {
			if len(got) > n {
				t.Fatalf("%d notices, want %d: %+v", len(got), n, got)
			}
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d notices after 20s, want %d: %+v", len(got), n, got)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// clock is an injected clock moved by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

func start(t *testing.T, cfg alert.Config) *alert.Alerter {
	t.Helper()
	if cfg.Secret == "" {
		cfg.Secret = secret
	}
	if cfg.Every == 0 {
		cfg.Every = time.Hour // the tests call Flush themselves
	}
	a, err := alert.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.Stop(ctx)
	})
	return a
}

func TestDeadLettersBatched(t *testing.T) {
	r := newReceiver(t)
	c := &clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	a := start(t, alert.Config{URL: r.srv.URL, Now: c.Now, DeadLetterInterval: 5 * time.Minute, Gateway: "gw-1"})

	for range 100 {
		a.Dead("billing")
		a.Dead("crm")
	}
	a.Flush()
	got := r.wait(t, 2)
	counts := map[string]int{}
	for _, n := range got {
		if n.Type != alert.TypeDeadLetters || n.Data.Gateway != "gw-1" || !strings.Contains(n.Text, n.Data.Route) ||
			!strings.Contains(n.Text, "100 new dead letters") {
			t.Errorf("notice = %+v", n)
		}
		counts[n.Data.Route] = n.Data.Count
	}
	if counts["billing"] != 100 || counts["crm"] != 100 {
		t.Fatalf("counts = %v, want 100 for each route in one notice", counts)
	}

	// 50 more within the interval wait for it: one notice with their count.
	for range 50 {
		a.Dead("billing")
	}
	c.add(time.Minute)
	a.Flush()
	c.add(4*time.Minute - time.Second)
	a.Flush()
	c.add(time.Second)
	a.Flush()
	got = r.wait(t, 3)
	if n := got[2]; n.Type != alert.TypeDeadLetters || n.Data.Route != "billing" || n.Data.Count != 50 ||
		!n.Data.Since.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("third notice = %+v, want billing's 50 at the interval's end", n)
	}
	// Nothing new: no notice.
	c.add(time.Hour)
	a.Flush()
	a.Dead("crm")
	a.Flush()
	if got := r.wait(t, 4); got[3].Data.Route != "crm" || got[3].Data.Count != 1 || !strings.Contains(got[3].Text, "1 new dead letter ") {
		t.Fatalf("fourth notice = %+v", got[3])
	}
}

func TestBreakerNotices(t *testing.T) {
	r := newReceiver(t)
	a := start(t, alert.Config{URL: r.srv.URL})
	until := time.Now().Add(30 * time.Second)
	a.BreakerOpened("billing", 10, until)
	a.BreakerClosed("billing", false)
	a.BreakerClosed("crm", true)
	got := r.wait(t, 3)
	if n := got[0]; n.Type != alert.TypeBreakerOpened || n.Data.Route != "billing" || n.Data.Failures != 10 ||
		!n.Data.OpenUntil.Equal(until.UTC().Truncate(0)) || !strings.Contains(n.Text, "billing") {
		t.Errorf("opened = %+v", n)
	}
	if n := got[1]; n.Type != alert.TypeBreakerClosed || n.Data.Reason != "probe_succeeded" {
		t.Errorf("closed = %+v", n)
	}
	if n := got[2]; n.Type != alert.TypeBreakerClosed || n.Data.Reason != "resumed" || n.Data.Route != "crm" {
		t.Errorf("resumed = %+v", n)
	}
}

func TestOutboxNotices(t *testing.T) {
	r := newReceiver(t)
	a := start(t, alert.Config{URL: r.srv.URL, OutboxAge: time.Minute})
	a.OutboxAge(0)
	a.OutboxAge(time.Minute) // at the threshold: not past it
	a.OutboxAge(90 * time.Second)
	a.OutboxAge(2 * time.Minute) // still stalled: no second notice
	a.OutboxAge(0)
	got := r.wait(t, 2)
	if got[0].Type != alert.TypeOutboxStalled || got[0].Data.OutboxAgeSeconds != 90 || got[0].Data.ThresholdSeconds != 60 {
		t.Errorf("stalled = %+v", got[0])
	}
	if got[1].Type != alert.TypeOutboxRecovered {
		t.Errorf("recovered = %+v", got[1])
	}
}

// The run loop reads the outbox age itself.
func TestOutboxWatched(t *testing.T) {
	r := newReceiver(t)
	var age atomic.Int64
	age.Store(int64(time.Hour))
	start(t, alert.Config{URL: r.srv.URL, OutboxAge: time.Minute, Every: 10 * time.Millisecond,
		OutboxOldest: func(context.Context) (time.Duration, error) { return time.Duration(age.Load()), nil }})
	r.wait(t, 1)
	age.Store(0)
	if got := r.wait(t, 2); got[1].Type != alert.TypeOutboxRecovered {
		t.Fatalf("notices = %+v", got)
	}
}

// A receiver that fails gets a few retries; then the notice is dropped and
// counted, and the URL (it may hold a token) is not logged.
func TestRetriedThenDropped(t *testing.T) {
	r := newReceiver(t)
	r.status.Store(http.StatusServiceUnavailable)
	reg := prometheus.NewRegistry()
	var logs strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	a, err := alert.New(alert.Config{URL: r.srv.URL + "/T0/B0/tokentokentoken", Secret: secret, Retries: 2,
		RetryWaitMin: time.Millisecond, RetryWaitMax: 2 * time.Millisecond, Registerer: reg, Every: time.Hour}, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Stop(context.Background()) }()
	a.BreakerClosed("billing", true)
	dropped := func() float64 { return droppedUndelivered(t, reg) }
	deadline := time.Now().Add(20 * time.Second)
	for dropped() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("dropped = %v after 20s", dropped())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if c := r.calls.Load(); c != 3 {
		t.Errorf("%d attempts, want 3 (2 retries)", c)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "alert notice not delivered") || strings.Contains(logs.String(), "tokentoken") ||
		strings.Contains(logs.String(), r.srv.URL) {
		t.Errorf("log = %s", logs.String())
	}
}

// A full queue drops a notice without waiting.
func TestQueueFullDrops(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := alert.New(alert.Config{URL: "http://127.0.0.1:1/", Secret: secret, QueueSize: 2, Registerer: reg},
		slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	// Not started: nothing takes from the queue.
	for range 5 {
		a.BreakerClosed("billing", false)
	}
	want := `
# HELP hookgate_alerts_dropped_total Alert notices dropped: queue_full, or undelivered after every retry.
# TYPE hookgate_alerts_dropped_total counter
hookgate_alerts_dropped_total{reason="queue_full"} 3
hookgate_alerts_dropped_total{reason="undelivered"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "hookgate_alerts_dropped_total"); err != nil {
		t.Fatal(err)
	}
}

func TestNewRefuses(t *testing.T) {
	for _, cfg := range []alert.Config{
		{URL: "ftp://x/", Secret: secret},
		{URL: "http:///x", Secret: secret},
		{URL: "http://x/", Secret: "nope"},
	} {
		if _, err := alert.New(cfg, slog.New(slog.DiscardHandler)); err == nil {
			t.Errorf("New(%q) accepted", cfg.URL)
		} else if strings.Contains(err.Error(), "MfKQ") {
			t.Errorf("error shows the secret: %v", err)
		}
	}
	var nilAlerter *alert.Alerter
	nilAlerter.Dead("x")
	nilAlerter.BreakerOpened("x", 1, time.Time{})
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// Stop sends the dead letters not yet reported and what is queued.
func TestStopSendsQueued(t *testing.T) {
	r := newReceiver(t)
	a, err := alert.New(alert.Config{URL: r.srv.URL, Secret: secret, Every: time.Hour}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	a.BreakerClosed("billing", true)
	a.Dead("billing")
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := r.wait(t, 2)
	if got[0].Type != alert.TypeBreakerClosed || got[1].Type != alert.TypeDeadLetters {
		t.Fatalf("notices = %+v", got)
	}
}

// Stop ends with its ctx even when the endpoint never answers.
func TestStopBounded(t *testing.T) {
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	defer hang.Close()
	defer close(release)
	reg := prometheus.NewRegistry()
	a, err := alert.New(alert.Config{URL: hang.URL, Secret: secret, Every: time.Hour, Timeout: time.Hour, Registerer: reg},
		slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		a.BreakerClosed("billing", false)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- a.Stop(ctx) }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Stop did not end with its ctx")
	}
	if n := droppedUndelivered(t, reg); n != 3 {
		t.Errorf("undelivered = %v, want 3", n)
	}
}

// droppedUndelivered is hookgate_alerts_dropped_total{reason="undelivered"}.
func droppedUndelivered(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "hookgate_alerts_dropped_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == "undelivered" {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatal("no hookgate_alerts_dropped_total{reason=undelivered}")
	return 0
}

// An endpoint's malformed answer is logged cut short: net/http quotes a
// status line it cannot parse whole (escaped, four bytes per byte of
// 0xff), and the log line held it all.
func TestMalformedAnswerLoggedShort(t *testing.T) {
	url := gatewaytest.RawServer(t, func(string) []byte {
		return append(bytes.Repeat([]byte{0xff}, 256<<10), "\r\n\r\n"...)
	})
	reg := prometheus.NewRegistry()
	var logs strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	a, err := alert.New(alert.Config{URL: url + "/hook", Secret: secret,
		RetryWaitMin: time.Millisecond, RetryWaitMax: 2 * time.Millisecond, Registerer: reg, Every: time.Hour}, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Stop(context.Background()) }()
	a.BreakerClosed("billing", true)
	gatewaytest.WaitFor(t, "the notice dropped", 20*time.Second, func() (bool, string) {
		n := droppedUndelivered(t, reg)
		return n == 1, fmt.Sprint(n)
	})
	mu.Lock()
	defer mu.Unlock()
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "alert notice not delivered") && len(line) > 2<<10 {
			t.Fatalf("a log line of %d bytes: %.300s…", len(line), line)
		}
	}
	if !strings.Contains(logs.String(), "malformed HTTP response") {
		t.Fatalf("log = %.1000s", logs.String())
	}
}
