package app

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
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

// /readyz/delivery follows an external NATS going away and coming back,
// naming each check; /readyz (store, shutdown, outbox: none over 60s old
// here) and /healthz answer 200 throughout, and so does intake.
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

	waitFor(t, "delivering", func() (bool, string) {
		code, r := delivery(t, a)
		return code == 200 && r.Status == "delivering", fmt.Sprintf("%d %+v", code, r)
	})
	_, r := delivery(t, a)
	for _, name := range []string{"outbox", "nats", "stream", "consumer billing"} {
		if c := r.check(name); !c.OK {
			t.Fatalf("/readyz/delivery check %s = %+v", name, c)
		}
	}
	code, r := ready(t, a)
	if code != 200 || r.Status != "ready" || len(r.Checks) != 3 {
		t.Fatalf("/readyz = %d %+v, want 200 with checks store, shutdown and outbox", code, r)
	}
	for _, name := range []string{"store", "shutdown", "outbox"} {
		if c := r.check(name); !c.OK {
			t.Fatalf("/readyz check %s = %+v", name, c)
		}
	}
	if code, body := get(t, "http://"+a.Addr()+"/healthz", ""); code != 200 || body != `{"status":"ok"}` {
		t.Fatalf("/healthz = %d %s", code, body)
	}

	srv.Shutdown()
	srv.WaitForShutdown()
	waitFor(t, "not delivering", func() (bool, string) {
		code, r := delivery(t, a)
		c := r.check("nats")
		return code == 503 && r.Status == "not_delivering" && !c.OK && strings.Contains(c.Reason, "not connected"),
			fmt.Sprintf("%d %+v", code, r)
	})
	_, r = delivery(t, a)
	if c := r.check("consumer billing"); c.OK || c.Reason == "" {
		t.Fatalf("consumer check during the NATS outage: %+v", c)
	}
	if code, r := ready(t, a); code != 200 || !r.check("store").OK {
		t.Fatalf("/readyz during the NATS outage: %d %+v", code, r)
	}
	if code, _ := get(t, "http://"+a.Addr()+"/healthz", ""); code != 200 {
		t.Fatalf("/healthz during the NATS outage: %d", code)
	}
	if code, body := postStripe(t, a, "evt_during_outage"); code != 200 {
		t.Fatalf("intake during the NATS outage: %d %s", code, body)
	}

	runNATS(t, port, natsDir)
	waitFor(t, "delivering again", func() (bool, string) {
		code, r := delivery(t, a)
		return code == 200 && r.Status == "delivering", fmt.Sprintf("%d %+v", code, r)
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
	if code, r := delivery(t, a); code != 503 || r.check("nats").OK {
		t.Fatalf("/readyz/delivery with NATS down = %d %+v", code, r)
	}
}

// delivery is ready for /readyz/delivery.
func delivery(t *testing.T, a *App) (int, readyAnswer) {
	t.Helper()
	return probe(t, a, "/readyz/delivery")
}

func probe(t *testing.T, a *App, path string) (int, readyAnswer) {
	t.Helper()
	code, body := get(t, "http://"+a.Addr()+path, "")
	var out readyAnswer
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatalf("%s answered %d %q: %v", path, code, body, err)
	}
	return code, out
}

// An external NATS goes away: the gateway still takes events, so /readyz
// (what a load balancer probes) stays 200 while intake answers 2xx;
// /readyz/delivery is 503 naming nats, and hookgate_nats_connected is 0.
// NATS back: both 200, and the event taken meanwhile is delivered.
func TestReadyWhileNATSDown(t *testing.T) {
	ds, delivered := countingDownstream(t)
	natsDir := t.TempDir()
	port := freePort(t)
	srv := runNATS(t, port, natsDir)
	cfg := testConfig(t, fmt.Sprintf(`
nats: {url: "nats://127.0.0.1:%d", connect_timeout: 2s}
routes:
  - {name: billing, sources: [stripe], url: %q}
`, port, ds.URL))
	a := startApp(t, cfg)
	waitFor(t, "delivering", func() (bool, string) {
		code, r := delivery(t, a)
		return code == 200, fmt.Sprintf("%d %+v", code, r)
	})

	srv.Shutdown()
	srv.WaitForShutdown()
	waitFor(t, "/readyz/delivery 503 naming nats", func() (bool, string) {
		code, r := delivery(t, a)
		c := r.check("nats")
		return code == 503 && !c.OK && strings.Contains(c.Reason, "not connected"), fmt.Sprintf("%d %+v", code, r)
	})
	for i := range 3 {
		if code, r := ready(t, a); code != 200 || r.Status != "ready" || !r.check("store").OK {
			t.Fatalf("/readyz with NATS down = %d %+v, want 200: the gateway takes events", code, r)
		}
		if code, body := postStripe(t, a, fmt.Sprintf("evt_nats_down_%d", i)); code != 200 {
			t.Fatalf("intake with NATS down: %d %s", code, body)
		}
	}
	if v := value(scrape(t, a, ""), "hookgate_nats_connected"); v != 0 {
		t.Fatalf("hookgate_nats_connected = %v with NATS down, want 0", v)
	}

	runNATS(t, port, natsDir)
	waitFor(t, "/readyz/delivery 200 again", func() (bool, string) {
		code, r := delivery(t, a)
		return code == 200, fmt.Sprintf("%d %+v", code, r)
	})
	if code, r := ready(t, a); code != 200 {
		t.Fatalf("/readyz with NATS back = %d %+v", code, r)
	}
	if v := value(scrape(t, a, ""), "hookgate_nats_connected"); v != 1 {
		t.Fatalf("hookgate_nats_connected = %v with NATS back, want 1", v)
	}
	waitFor(t, "3 delivered", func() (bool, string) { n := delivered(); return n == 3, fmt.Sprint(n) })
}

// A /readyz request that reaches the gateway while it drains on stop is
// answered 503: the gateway no longer takes events.
func TestReadyzFailsWhileStopping(t *testing.T) {
	cfg := testConfig(t, "")
	a := startApp(t, cfg)
	waitFor(t, "ready", func() (bool, string) {
		code, r := ready(t, a)
		return code == 200, fmt.Sprintf("%d %+v", code, r)
	})
	// A request begun before the stop holds the drain open until it ends.
	conn, err := net.Dial("tcp", a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /readyz HTTP/1.1\r\nHost: gw\r\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the gateway read the request's first bytes", func() (bool, string) {
		a.conns.mu.Lock()
		defer a.conns.mu.Unlock()
		for c := range a.conns.conns {
			if c.RemoteAddr().String() == conn.LocalAddr().String() {
				return c.used.Load(), "not yet"
			}
		}
		return false, "the connection is not tracked"
	})
	addr := a.Addr()
	stopped := make(chan error, 1)
	go func() { stopped <- a.Stop(context.Background()) }()
	waitFor(t, "the listener closed", func() (bool, string) {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return false, "still accepting"
		}
		return true, ""
	})
	if _, err := conn.Write([]byte("\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var r readyAnswer
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("/readyz while stopping answered %d %q: %v", resp.StatusCode, body, err)
	}
	if c := r.check("shutdown"); resp.StatusCode != 503 || r.Status != "not_ready" || c.OK || c.Reason == "" {
		t.Fatalf("/readyz while stopping = %d %s, want 503 with a failed shutdown check", resp.StatusCode, body)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
}

// natsProcesses runs an n-node JetStream cluster of nats-server processes
// (the module's own nats-server, built once) routed on 127.0.0.1, stores
// in t.TempDir(), and waits until every node is current. A process can be
// SIGKILLed as a crashed node is: an in-process server's Shutdown first
// hands its RAFT leaderships over, so its loss elects no one the hard way.
func natsProcesses(t *testing.T, n int) (url string, nodes []*gatewaytest.Process) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "nats-server")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		t.Fatalf("go build nats-server: %v\n%s", err, out)
	}
	client, cluster, monitor := make([]int, n), make([]int, n), make([]int, n)
	var urls, routes []string
	for i := range n {
		client[i], cluster[i], monitor[i] = freePort(t), freePort(t), freePort(t)
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", client[i]))
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", cluster[i]))
	}
	for i := range n {
		p, err := gatewaytest.Start(fmt.Sprintf("n%d", i+1), []string{bin,
			"-n", fmt.Sprintf("n%d", i+1), "-a", "127.0.0.1", "-p", fmt.Sprint(client[i]),
			"-m", fmt.Sprint(monitor[i]), "-js", "-sd", t.TempDir(),
			"--cluster_name", "hookgate-test", "--cluster", routes[i], "--routes", strings.Join(routes, ","),
		}, gatewaytest.Options{DieWithParent: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Kill)
		nodes = append(nodes, p)
	}
	for i := range n {
		gatewaytest.WaitFor(t, fmt.Sprintf("nats-server n%d current", i+1), 60*time.Second, func() (bool, string) {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", monitor[i]))
			if err != nil {
				return false, err.Error()
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode == 200, fmt.Sprintf("%d %s\n%s", resp.StatusCode, b, nodes[i].Tail(5))
		})
	}
	return strings.Join(urls, ","), nodes
}

// On a 3-node NATS cluster, the node leading the events stream is
// SIGKILLed: while the others elect a new leader, /readyz/delivery fails
// but /readyz does not, and intake answers 2xx throughout; every event is
// delivered once the stream has a leader again.
func TestReadyThroughStreamLeaderLoss(t *testing.T) {
	url, nodes := natsProcesses(t, 3)
	ds, delivered := countingDownstream(t)
	cfg := testConfig(t, fmt.Sprintf(`
nats: {url: %q, replicas: 3, connect_timeout: 5s}
cluster: {enabled: true}
routes:
  - {name: billing, sources: [stripe], url: %q}
`, url, ds.URL))
	a := startApp(t, cfg)
	var leader string
	gatewaytest.WaitFor(t, "the stream's leader", 30*time.Second, func() (bool, string) {
		code, r := delivery(t, a)
		leader = streamLeader(a)
		return code == 200 && leader != "", fmt.Sprintf("%d %+v leader %q", code, r, leader)
	})
	if code, body := postStripe(t, a, "evt_before"); code != 200 {
		t.Fatalf("post: %d %s", code, body)
	}
	var node *gatewaytest.Process
	for i, p := range nodes {
		if leader == fmt.Sprintf("n%d", i+1) {
			node = p
		}
	}
	if node == nil {
		t.Fatalf("stream leader %q is none of the nodes", leader)
	}
	node.Kill()
	var posted, deliveryFailed int
	var notReady []string
	gatewaytest.WaitFor(t, "a new stream leader and /readyz/delivery 200", 90*time.Second, func() (bool, string) {
		if code, r := ready(t, a); code != 200 {
			notReady = append(notReady, fmt.Sprintf("%d %+v", code, r))
		}
		if code, body := postStripe(t, a, fmt.Sprintf("evt_election_%d", posted)); code != 200 {
			t.Fatalf("intake during the election: %d %s", code, body)
		}
		posted++
		code, r := delivery(t, a)
		if code != 200 {
			deliveryFailed++
		}
		l := streamLeader(a)
		return code == 200 && l != "" && l != leader, fmt.Sprintf("%d %+v leader %q", code, r, l)
	})
	if len(notReady) > 0 {
		t.Fatalf("/readyz failed %d times while the stream's leader was lost:\n%s", len(notReady), strings.Join(notReady, "\n"))
	}
	t.Logf("%d events posted during the election; /readyz/delivery failed %d times", posted, deliveryFailed)
	gatewaytest.WaitFor(t, "every event delivered", 90*time.Second, func() (bool, string) {
		n := delivered()
		return n == posted+1, fmt.Sprintf("%d of %d", n, posted+1)
	})
}

// streamLeader is the name of the server leading the events stream ("" if
// none answers).
func streamLeader(a *App) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := a.Broker().JetStream().Stream(ctx, a.Broker().Stream())
	if err != nil {
		return ""
	}
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil {
		return ""
	}
	return info.Cluster.Leader
}
