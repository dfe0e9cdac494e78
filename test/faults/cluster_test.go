package faults

import (
	"fmt"
	"io"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// Scenario 12: cluster mode. Three gateways (the real binary, each with its
// own data_dir, cluster.enabled) on an in-process 3-node NATS cluster
// (replicas 3, a 1s duplicate window) behind a load balancer that sends each
// request to a random gateway. Every event is sent as 2 or 3 copies spread
// over 3s, past the duplicate window. Under load one gateway is SIGKILLed
// mid-round and restarted, the NATS node leading the events stream is shut
// down and brought back, then the one leading the delivery-state bucket.
// lost = 0, doubled = 0, forged = 0 across the cluster, and no delivery
// answered 2xx is sent again (except a round the SIGKILL cut).
func TestCluster(t *testing.T) {
	t.Parallel()
	nc := gatewaytest.RunNATSCluster(t, 3)
	cs := newClusterScenario(t, nc, 3)
	s := cs.s
	evs := s.newEvents("cl", 400, 0)
	s.ds.setLatency(250 * time.Millisecond) // rounds in flight when the gateway is killed
	for i := range cs.gws {
		cs.start(i)
	}
	cs.waitStreamLeader()
	s.provider.start(16, 0)
	s.forger.run(evs)

	// The feeder: copies of each event at random moments, spread past the
	// duplicate window, in an order fixed by the seed.
	feedRNG := newRNG(s.seed, 10)
	type send struct {
		at time.Duration
		ev *event
	}
	var plan []send
	for i, ev := range evs {
		base := time.Duration(i) * 30 * time.Millisecond // 400 events over 12s
		for range 2 + feedRNG.intn(2) {
			plan = append(plan, send{base + feedRNG.between(0, 3*time.Second), ev})
		}
	}
	slices.SortStableFunc(plan, func(a, b send) int { return int(a.at - b.at) })
	quit := make(chan struct{})
	var feeder sync.WaitGroup
	feeder.Add(1)
	go func() {
		defer feeder.Done()
		start := time.Now()
		for _, p := range plan {
			if !sleepUntil(quit, time.Until(start.Add(p.at))) {
				return
			}
			s.provider.add(p.ev)
		}
	}()
	t.Cleanup(func() { close(quit); feeder.Wait() })

	// The faults, at moments of the seed.
	time.Sleep(s.rng.between(1500*time.Millisecond, 3*time.Second))
	victim := s.rng.intn(len(cs.gws))
	// Mid-round: once the victim has a request at the downstream.
	gatewaytest.WaitFor(t, fmt.Sprintf("gateway %d to have a request in flight", victim), 20*time.Second, func() (bool, string) {
		return cs.front.inFlight(fmt.Sprintf("gw%d", victim)) > 0, "none"
	})
	killedAt := time.Now()
	cs.kill(victim)
	t.Logf("%s: SIGKILL gateway %d", time.Since(cs.began).Round(time.Millisecond), victim)
	time.Sleep(s.rng.between(1*time.Second, 2*time.Second))
	leader := cs.streamLeader()
	if leader < 0 {
		t.Fatal("no NATS node leads the events stream")
	}
	nc.Stop(leader)
	t.Logf("shut down n%d, the events stream's leader", leader+1)
	time.Sleep(s.rng.between(1*time.Second, 3*time.Second))
	cs.start(victim)
	t.Logf("restarted gateway %d", victim)
	time.Sleep(s.rng.between(1*time.Second, 2*time.Second))
	nc.Start(t, leader)
	nc.WaitLeader(t)
	t.Logf("%s: n%d back", time.Since(cs.began).Round(time.Millisecond), leader+1)
	// Then the node leading the delivery-state bucket (perhaps the same).
	time.Sleep(s.rng.between(500*time.Millisecond, 1500*time.Millisecond))
	if kv := cs.leaderOf(deliveriesStream); kv >= 0 {
		nc.Stop(kv)
		t.Logf("%s: shut down n%d, the delivery-state bucket's leader", time.Since(cs.began).Round(time.Millisecond), kv+1)
		time.Sleep(s.rng.between(1*time.Second, 3*time.Second))
		nc.Start(t, kv)
		nc.WaitLeader(t)
		t.Logf("%s: n%d back", time.Since(cs.began).Round(time.Millisecond), kv+1)
	} else {
		t.Errorf("no NATS node leads %s", deliveriesStream)
	}

	feeder.Wait()
	cs.verify(victim, killedAt)
}

// clusterScenario is a scenario with several gateways: the suite's
// downstream, provider and forger, the provider and forger sending through
// a load balancer.
type clusterScenario struct {
	s       *scenario
	natsURL string                  // the NATS cluster's client URLs, comma-joined
	leader  func(stream string) int // the index of the node leading stream, -1 if none
	lb      *httptest.Server
	cfgs    []gwConfig
	gws     []*gatewaytest.Process // nil while stopped
	runs    []int
	front   *front
	began   time.Time
}

// front is before the recording downstream: it counts each gateway's
// requests in flight and records which gateway got each 2xx.
type front struct {
	ds *downstream

	mu      sync.Mutex
	running map[string]int // by gateway
	oks     []okAnswer
}

// okAnswer is a 2xx the downstream answered.
type okAnswer struct {
	gw, route, id string
	sent, at      time.Time
}

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	gw := r.Header.Get("X-Gw")
	sent := time.Now()
	f.mu.Lock()
	f.running[gw]++
	f.mu.Unlock()
	sw := &statusWriter{ResponseWriter: w}
	f.ds.serve(sw, r)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running[gw]--
	if sw.status >= 200 && sw.status < 300 {
		f.oks = append(f.oks, okAnswer{gw: gw, route: strings.TrimPrefix(r.URL.Path, "/r/"),
			id: r.Header.Get("X-Hookgate-Event-Id"), sent: sent, at: time.Now()})
	}
}

func (f *front) inFlight(gw string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running[gw]
}

// statusWriter keeps the status written; Unwrap lets the downstream
// hijack the connection.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func newClusterScenario(t *testing.T, nc *gatewaytest.NATSCluster, n int) *clusterScenario {
	t.Helper()
	leader := func(stream string) int {
		for i, srv := range nc.Servers {
			if srv != nil && srv.JetStreamIsStreamLeader("$G", stream) {
				return i
			}
		}
		return -1
	}
	return newClusterScenarioOn(t, nc.URL, nil, leader, n)
}

// newClusterScenarioOn is newClusterScenario on the NATS cluster at
// natsURL; gateway i connects to gwNATS[i] instead where set (e.g.
// through proxies that can cut it off).
func newClusterScenarioOn(t *testing.T, natsURL string, gwNATS []string, leader func(string) int, n int) *clusterScenario {
	t.Helper()
	seed := scenarioSeed(t)
	s := &scenario{t: t, seed: seed, rng: newRNG(seed, 1), dir: t.TempDir(),
		events: map[string]*event{}, evRNG: newRNG(seed, 2)}
	cs := &clusterScenario{s: s, natsURL: natsURL, leader: leader, gws: make([]*gatewaytest.Process, n), runs: make([]int, n),
		began: time.Now()}
	t.Cleanup(cs.dumpLogsOnFailure) // runs last
	s.ds = newDownstream(t, newRNG(seed, 3))
	cs.front = &front{ds: s.ds, running: map[string]int{}}
	fs := httptest.NewServer(cs.front)
	t.Cleanup(fs.Close)
	var backends []*url.URL
	for i := range n {
		gwURL := natsURL
		if i < len(gwNATS) && gwNATS[i] != "" {
			gwURL = gwNATS[i]
		}
		c := gwConfig{
			Listen:          fmt.Sprintf("127.0.0.1:%d", freePort(t)),
			DataDir:         filepath.Join(s.dir, fmt.Sprintf("data%d", i)),
			NATSURL:         gwURL,
			Downstream:      fs.URL,
			RouteTimeout:    2 * time.Second,
			ShutdownTimeout: 10 * time.Second,
			Extra:           "cluster: {enabled: true}\napi: {tokens: [" + clusterToken + "]}\n",
		}
		yaml := strings.Replace(c.yaml(), "connect_timeout: 2s}", "connect_timeout: 2s, replicas: 3, duplicate_window: 1s}", 1)
		// Each gateway's requests carry its name, for the front.
		yaml = strings.ReplaceAll(yaml, "    timeout: ", fmt.Sprintf("    headers: {X-Gw: gw%d}\n    timeout: ", i))
		if !strings.Contains(yaml, "replicas: 3") || !strings.Contains(yaml, "X-Gw") {
			t.Fatal("cluster config: no nats line or route to extend")
		}
		if err := os.WriteFile(cs.configPath(i), []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		cs.cfgs = append(cs.cfgs, c)
		backends = append(backends, &url.URL{Scheme: "http", Host: c.Listen})
	}
	s.cfg = cs.cfgs[0]
	s.cfg.NATSURL = natsURL // checkStream reads the stream there
	lbRNG := newRNG(seed, 11)
	cs.lb = httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(backends[lbRNG.intn(len(backends))])
		},
		ErrorLog: log.New(io.Discard, "", 0), // a killed gateway: 502, and the sender retries
	})
	t.Cleanup(cs.lb.Close)
	s.provider = newProvider(cs.lb.URL+"/webhooks/stripe", newRNG(seed, 4), 24)
	s.forger = newForger(cs.lb.URL+"/webhooks/stripe", newRNG(seed, 5))
	t.Cleanup(func() {
		for _, g := range cs.gws {
			if g != nil {
				g.Kill()
			}
		}
	})
	t.Cleanup(s.provider.stop)
	t.Cleanup(s.forger.stop)
	return cs
}

func (cs *clusterScenario) configPath(i int) string {
	return filepath.Join(cs.s.dir, fmt.Sprintf("config%d.yaml", i))
}

func (cs *clusterScenario) logPath(i, run int) string {
	return filepath.Join(cs.s.dir, fmt.Sprintf("gateway%d-%d.log", i, run))
}

// start runs gateway i and waits until it answers /healthz.
func (cs *clusterScenario) start(i int) {
	t := cs.s.t
	t.Helper()
	if cs.gws[i] != nil {
		t.Fatalf("start: gateway %d is already running", i)
	}
	cs.runs[i]++
	p, err := gatewaytest.Start(fmt.Sprintf("gateway %d run %d", i, cs.runs[i]),
		[]string{gatewaytest.Binary(t), "-config", cs.configPath(i)},
		gatewaytest.Options{LogPath: cs.logPath(i, cs.runs[i])})
	if err != nil {
		t.Fatal(err)
	}
	cs.gws[i] = p
	if err := p.WaitHTTP("http://"+cs.cfgs[i].Listen+"/healthz", 30*time.Second); err != nil {
		if p.Exited() {
			cs.gws[i] = nil
		}
		t.Fatal(err)
	}
}

func (cs *clusterScenario) kill(i int) {
	cs.gws[i].Kill()
	cs.gws[i] = nil
}

// deliveriesStream is the stream of the delivery-state KV bucket.
const deliveriesStream = "KV_HOOKGATE_DELIVERIES"

// streamLeader is the index of the NATS node leading the events stream,
// -1 if none does now.
func (cs *clusterScenario) streamLeader() int { return cs.leaderOf(streamName) }

// leaderOf is the index of the NATS node leading stream, -1 if none does
// now.
func (cs *clusterScenario) leaderOf(stream string) int { return cs.leader(stream) }

// waitStreamLeader waits until the gateways made the events stream and a
// node leads it.
func (cs *clusterScenario) waitStreamLeader() {
	gatewaytest.WaitFor(cs.s.t, "a leader of the events stream", 30*time.Second, func() (bool, string) {
		return cs.streamLeader() >= 0, "none"
	})
}

// verify waits for the senders and for every acknowledged event to be
// delivered, then checks lost, doubled and forged across the cluster,
// stops every gateway (exit status 0) and checks their databases.
func (cs *clusterScenario) verify(victim int, killedAt time.Time) {
	s, t := cs.s, cs.s.t
	t.Helper()
	for i, g := range cs.gws {
		if g == nil {
			t.Fatalf("verify: gateway %d is not running", i)
		}
	}
	s.ds.set(modeOK)
	s.ds.setLatency(0)
	if err := s.provider.waitIdle(90 * time.Second); err != nil {
		t.Errorf("provider: %v", err)
	}
	s.provider.stop()
	s.forger.stop()
	t.Logf("%s: every send answered 2xx", time.Since(cs.began).Round(time.Millisecond))
	// A round cut by the SIGKILL holds its lease (route timeout × 2 +
	// retry_wait_max + 30s) and its message comes back after the ack wait
	// (30s): allow well beyond both.
	drainStart := time.Now()
	deadline := drainStart.Add(100 * time.Second)
	a := s.audit()
	for a.lost > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		a = s.audit()
	}
	s.drained = time.Since(drainStart)
	time.Sleep(300 * time.Millisecond) // late deliveries under a second key would show now
	a = s.audit()
	report := func(kind string, n int) {
		if n > 0 {
			t.Errorf("%s = %d, want 0; e.g.\n  %s", kind, n, strings.Join(a.examples[kind], "\n  "))
		}
	}
	report("lost", a.lost)
	report("doubled", a.doubled)
	report("forged", a.forged)
	report("corrupt", a.corrupt)

	// Sent again after a 2xx (under the same key): a round cut by the
	// SIGKILL after the downstream answered is run again; anything more
	// is reported.
	resent := cs.resentAfterSuccess(fmt.Sprintf("gw%d", victim), killedAt)

	p := s.provider
	p.mu.Lock()
	twice := 0
	for _, n := range p.accepted {
		if n > 1 {
			twice++ // the claim at intake did not answer within claim_timeout
		}
	}
	if len(p.refused) > 0 {
		t.Errorf("%d genuine sends were refused with a 4xx, e.g. %v", len(p.refused), p.refused[:min(5, len(p.refused))])
	}
	intake := fmt.Sprintf("intake: %d requests, %d transport errors, statuses %v", p.requests, p.transportErrs, p.statuses)
	p.mu.Unlock()
	f := s.forger
	f.mu.Lock()
	if len(f.accepted) > 0 {
		t.Errorf("forged = %d forgeries answered 2xx, e.g. %v", len(f.accepted), f.accepted[:min(5, len(f.accepted))])
	}
	forgeries := f.sent
	f.mu.Unlock()

	s.checkStream(false)
	if st, err := readStream(cs.natsURL); err == nil {
		t.Logf("the stream stored %d messages for %d acknowledged events", st.lastSeq, a.acked)
	}
	t.Logf("%s: audited", time.Since(cs.began).Round(time.Millisecond))
	t.Logf("%d events acknowledged (%d answered \"accepted\" by two gateways); %s; %d forgeries refused; downstream: %d requests, %d answered 2xx, %d (route, event) answered 2xx more than once; all delivered %s after the load; gateway runs %v; lost=%d doubled=%d forged=%d",
		a.acked, twice, intake, forgeries, a.deliveries, a.ok, resent, s.drained.Round(time.Millisecond), cs.runs, a.lost, a.doubled, a.forged)
	cs.checkOneView()

	for i, g := range cs.gws {
		cs.gws[i] = nil
		_ = g.Signal(syscall.SIGTERM)
		if limit := cs.cfgs[i].ShutdownTimeout + 10*time.Second; !g.Wait(limit) {
			t.Errorf("gateway %d did not exit within %s of SIGTERM", i, limit)
			g.Kill()
		} else if code := g.ExitCode(); code != 0 {
			t.Errorf("gateway %d exited with status %d after SIGTERM, want 0", i, code)
		}
	}
	t.Logf("%s: gateways stopped", time.Since(cs.began).Round(time.Millisecond))
	cs.checkDBs()
}

// resentAfterSuccess counts the (route, event) pairs the downstream
// answered 2xx more than once. Only a round cut by the SIGKILL (its 2xx
// answered to the victim, sent before the kill) may be run again: any
// other is an error (a delivery that succeeded was run again).
func (cs *clusterScenario) resentAfterSuccess(victim string, killedAt time.Time) int {
	type pair struct{ route, id string }
	cs.front.mu.Lock()
	oks := slices.Clone(cs.front.oks)
	cs.front.mu.Unlock()
	first := map[pair]okAnswer{}
	n := 0
	for _, o := range oks { // in the order answered
		p := pair{o.route, o.id}
		f, seen := first[p]
		if !seen {
			first[p] = o
			continue
		}
		n++
		if f.gw != victim || f.sent.After(killedAt) {
			cs.s.t.Errorf("route %s, event %s: answered 2xx to %s at %s, then sent again by %s at %s (a success run again)",
				p.route, p.id, f.gw, f.at.Format("15:04:05.000"), o.gw, o.sent.Format("15:04:05.000"))
		}
	}
	return n
}

// checkDBs opens every stopped gateway's database: each is intact, holds
// no forgery and only genuine bodies, and holds every acknowledged event.
func (cs *clusterScenario) checkDBs() {
	s, t := cs.s, cs.s.t
	t.Helper()
	union := map[string]bool{}
	acked := s.provider.ackedIDs()
	for i, c := range cs.cfgs {
		db, err := openDB(c.dbPath())
		if err != nil {
			t.Errorf("gateway %d: open the database: %v", i, err)
			continue
		}
		var integrity string
		if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&integrity); err != nil || integrity != "ok" {
			t.Errorf("gateway %d: database integrity_check: %q %v", i, integrity, err)
		}
		stored, err := storedEvents(db)
		db.Close()
		if err != nil {
			t.Errorf("gateway %d: read events: %v", i, err)
			continue
		}
		for id, sum := range stored {
			ev := s.event(id)
			switch {
			case ev == nil || s.forger.forgedOnly(id):
				t.Errorf("forged: gateway %d's database holds event %s, which only forgeries carried", i, id)
			case sum != ev.Sum:
				t.Errorf("gateway %d's database holds event %s with a body that is not the genuine one", i, id)
			}
			union[id] = true
		}
		// Every store is a replica of the cluster's record.
		lacking := 0
		for id := range acked {
			if _, ok := stored[id]; !ok {
				lacking++
			}
		}
		if lacking > 0 {
			t.Errorf("gateway %d's database lacks %d of %d acknowledged events (not replicated)", i, lacking, len(acked))
		}
	}
	missing := 0
	for _, id := range slices.Sorted(maps.Keys(acked)) {
		if !union[id] {
			if missing++; missing <= 5 {
				t.Errorf("lost: acknowledged event %s is in no gateway's database", id)
			}
		}
	}
}

// dumpLogsOnFailure prints the end of every gateway log of a failed
// scenario.
func (cs *clusterScenario) dumpLogsOnFailure() {
	t := cs.s.t
	if !t.Failed() {
		return
	}
	for i := range cs.runs {
		for run := 1; run <= cs.runs[i]; run++ {
			b, err := os.ReadFile(cs.logPath(i, run))
			if err != nil {
				continue
			}
			lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
			lines = lines[max(0, len(lines)-40):]
			t.Logf("--- gateway %d run %d, last %d log lines:\n%s", i, run, len(lines), strings.Join(lines, "\n"))
		}
	}
}
