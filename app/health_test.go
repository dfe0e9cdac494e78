package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/hookgate/hookgate/store"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

type readyAnswer struct {
	Status string  `json:"status"`
	Checks []check `json:"checks"`
}

func ready(t *testing.T, a *App) (int, readyAnswer) {
	t.Helper()
	code, body := get(t, "http://"+a.Addr()+"/readyz", "")
	var out readyAnswer
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatalf("/readyz answered %d %q: %v", code, body, err)
	}
	return code, out
}

func (r readyAnswer) check(name string) check {
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	return check{Name: name, Reason: "missing from the answer"}
}

func runNATS(t *testing.T, port int, dir string) *server.Server {
	t.Helper()
	return gatewaytest.RunNATS(t, port, dir)
}

func freePort(t *testing.T) int {
	t.Helper()
	return gatewaytest.FreePort(t)
}

// /readyz follows an external NATS going away and coming back; /healthz
// answers throughout, and so does intake.
func TestReadinessFollowsNATS(t *testing.T) {
	downstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(downstream.Close)
	natsDir := t.TempDir()
	port := freePort(t)
	srv := runNATS(t, port, natsDir)
	cfg := testConfig(t, fmt.Sprintf(`
nats: {url: "nats://127.0.0.1:%d", connect_timeout: 2s}
routes:
  - {name: billing, sources: [stripe], url: %q}
`, port, downstream.URL))
	a := startApp(t, cfg)

	waitFor(t, "ready", func() (bool, string) {
		code, r := ready(t, a)
		return code == 200 && r.Status == "ready", fmt.Sprintf("%d %+v", code, r)
	})
	_, r := ready(t, a)
	for _, name := range []string{"store", "nats", "stream", "consumer billing"} {
		if c := r.check(name); !c.OK {
			t.Fatalf("check %s = %+v", name, c)
		}
	}
	if code, body := get(t, "http://"+a.Addr()+"/healthz", ""); code != 200 || body != `{"status":"ok"}` {
		t.Fatalf("/healthz = %d %s", code, body)
	}

	srv.Shutdown()
	srv.WaitForShutdown()
	waitFor(t, "not ready", func() (bool, string) {
		code, r := ready(t, a)
		c := r.check("nats")
		return code == 503 && r.Status == "not_ready" && !c.OK && strings.Contains(c.Reason, "not connected"),
			fmt.Sprintf("%d %+v", code, r)
	})
	_, r = ready(t, a)
	if c := r.check("store"); !c.OK {
		t.Fatalf("store check during the NATS outage: %+v", c)
	}
	if c := r.check("consumer billing"); c.OK || c.Reason == "" {
		t.Fatalf("consumer check during the NATS outage: %+v", c)
	}
	if code, _ := get(t, "http://"+a.Addr()+"/healthz", ""); code != 200 {
		t.Fatalf("/healthz during the NATS outage: %d", code)
	}
	if code, body := postStripe(t, a, "evt_during_outage"); code != 200 {
		t.Fatalf("intake during the NATS outage: %d %s", code, body)
	}

	runNATS(t, port, natsDir)
	waitFor(t, "ready again", func() (bool, string) {
		code, r := ready(t, a)
		return code == 200 && r.Status == "ready", fmt.Sprintf("%d %+v", code, r)
	})
}

// The write probe writes at most once per interval, reports a failed write
// with its reason, and fails (without waiting longer) a write that does not
// commit in time.
func TestWriteProbe(t *testing.T) {
	var writes atomic.Int32
	var fail atomic.Bool
	block := make(chan struct{})
	var blocking atomic.Bool
	p := &writeProbe{every: 50 * time.Millisecond, timeout: 100 * time.Millisecond,
		write: func(ctx context.Context) error {
			writes.Add(1)
			if blocking.Load() {
				<-block
			}
			if fail.Load() {
				return errors.New("disk I/O error")
			}
			return nil
		}}
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		if err := p.check(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := writes.Load(); n != 1 {
		t.Fatalf("5 quick checks wrote %d times, want 1", n)
	}
	fail.Store(true)
	time.Sleep(60 * time.Millisecond)
	if err := p.check(ctx); err == nil || !strings.Contains(err.Error(), "not writable: disk I/O error") {
		t.Fatalf("failing write: %v", err)
	}
	fail.Store(false)
	blocking.Store(true)
	time.Sleep(60 * time.Millisecond)
	start := time.Now()
	if err := p.check(ctx); err == nil || !strings.Contains(err.Error(), "has not committed") {
		t.Fatalf("stuck write: %v", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("a stuck write held the check for %s", el)
	}
	if err := p.check(ctx); err == nil {
		t.Fatal("still stuck: want an error")
	}
	blocking.Store(false)
	close(block)
	waitFor(t, "writable again", func() (bool, string) {
		err := p.check(ctx)
		return err == nil, fmt.Sprint(err)
	})
}

func scrape(t *testing.T, a *App, token string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := get(t, "http://"+a.Addr()+"/metrics", token)
	if code != 200 {
		t.Fatalf("/metrics = %d %s", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// value returns the value of the metric with these labels (a histogram's
// sample count); -1 when there is none.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		case m.Untyped != nil:
			return m.Untyped.GetValue()
		}
	}
	return -1
}

// /metrics counts real traffic: intake outcomes, commits, publishes,
// deliveries by route and outcome; and needs the metrics token.
func TestMetricsCountTraffic(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(ok.Close)
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }))
	t.Cleanup(failing.Close)
	const token = "metrics-token-0123456789"
	cfg := testConfig(t, fmt.Sprintf(`
metrics: {token: %q}
routes:
  - {name: billing, sources: [stripe], url: %q}
  - {name: broken, sources: [stripe], url: %q, retries: 0, schedule: [10ms], breaker_threshold: 0}
`, token, ok.URL, failing.URL))
	a := startApp(t, cfg)

	for i := 0; i < 5; i++ {
		if code, body := postStripe(t, a, fmt.Sprintf("evt_%d", i)); code != 200 {
			t.Fatalf("post: %d %s", code, body)
		}
	}
	for i := 0; i < 2; i++ {
		postStripe(t, a, "evt_0") // duplicates
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+a.Addr()+"/webhooks/stripe", strings.NewReader(`{"id":"x"}`))
	req.Header.Set("Stripe-Signature", "t=1,v1=00")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("bad signature: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("bad signature: %d, want 401", resp.StatusCode)
	}
	resp, err = http.Post("http://"+a.Addr()+"/webhooks/nope", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatalf("unknown source: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("unknown source: %d, want 404", resp.StatusCode)
	}
	waitFor(t, "deliveries", func() (bool, string) {
		done := 0
		for i := 0; i < 5; i++ {
			d1, err1 := a.Store().Delivery(context.Background(), "billing", "stripe", fmt.Sprintf("evt_%d", i))
			d2, err2 := a.Store().Delivery(context.Background(), "broken", "stripe", fmt.Sprintf("evt_%d", i))
			if err1 == nil && err2 == nil && d1.State == store.StateSucceeded && d2.State == store.StateDead {
				done++
			}
		}
		return done == 5, fmt.Sprint(done)
	})

	if code, _ := get(t, "http://"+a.Addr()+"/metrics", ""); code != 401 {
		t.Fatalf("/metrics without the token: %d, want 401", code)
	}
	if code, _ := get(t, "http://"+a.Addr()+"/metrics", "wrong-token-0123456789"); code != 401 {
		t.Fatalf("/metrics with a wrong token: %d, want 401", code)
	}
	var fams map[string]*dto.MetricFamily
	want := map[string]float64{}
	check := func(name string, labels ...string) float64 { return value(fams, name, labels...) }
	waitFor(t, "metrics", func() (bool, string) {
		fams = scrape(t, a, token)
		want = map[string]float64{
			"accepted":     check("hookgate_inbound_requests_total", "source", "stripe", "outcome", "accepted"),
			"duplicate":    check("hookgate_inbound_requests_total", "source", "stripe", "outcome", "duplicate"),
			"unauthorized": check("hookgate_inbound_requests_total", "source", "stripe", "outcome", "unauthorized"),
			"unknown":      check("hookgate_inbound_requests_total", "source", "_unknown", "outcome", "unknown_source"),
			"latency":      check("hookgate_inbound_duration_seconds", "outcome", "accepted"),
			"published":    check("hookgate_outbox_published_total"),
			"backlog":      check("hookgate_outbox_backlog"),
			"succeeded":    check("hookgate_delivery_rounds_total", "route", "billing", "outcome", "succeeded"),
			"retrying":     check("hookgate_delivery_rounds_total", "route", "broken", "outcome", "retrying"),
			"dead":         check("hookgate_delivery_rounds_total", "route", "broken", "outcome", "dead"),
			"attempts":     check("hookgate_delivery_attempt_duration_seconds", "route", "broken"),
		}
		// Every counter, not only some: a round's outcome and its
		// attempts' durations are observed one after the other.
		return want["published"] == 5 && want["backlog"] == 0 && want["dead"] == 5 &&
			want["succeeded"] == 5 && want["attempts"] == 10, fmt.Sprint(want)
	})
	for k, v := range map[string]float64{"accepted": 5, "duplicate": 2, "unauthorized": 1, "unknown": 1, "latency": 5,
		"published": 5, "backlog": 0, "succeeded": 5, "retrying": 5, "dead": 5, "attempts": 10} {
		if want[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, want[k], v, want)
		}
	}
	if check("hookgate_store_commit_batch_size") < 5 {
		t.Errorf("commit batches: %v", check("hookgate_store_commit_batch_size"))
	}
	for _, name := range []string{"go_goroutines", "process_open_fds", "hookgate_build_info", "hookgate_retention_pruned_total",
		"hookgate_store_wal_restart_seconds"} {
		if fams[name] == nil {
			t.Errorf("%s is not exported", name)
		}
	}
}

// The backlog gauge shows events waiting for NATS.
func TestOutboxBacklogGauge(t *testing.T) {
	port := freePort(t) // nothing listens: NATS is down from the start
	cfg := testConfig(t, fmt.Sprintf(`nats: {url: "nats://127.0.0.1:%d", connect_timeout: 1s}`, port))
	a := startApp(t, cfg)
	for i := 0; i < 3; i++ {
		if code, body := postStripe(t, a, fmt.Sprintf("evt_%d", i)); code != 200 {
			t.Fatalf("post: %d %s", code, body)
		}
	}
	fams := scrape(t, a, "")
	if v := value(fams, "hookgate_outbox_backlog"); v != 3 {
		t.Fatalf("hookgate_outbox_backlog = %v, want 3", v)
	}
	if code, r := ready(t, a); code != 503 || r.check("nats").OK {
		t.Fatalf("/readyz with NATS down = %d %+v", code, r)
	}
}
