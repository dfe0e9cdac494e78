package faults

// The harness: the gateway binary as a subprocess, a recording downstream,
// a Stripe provider simulator, a forger, and the audit run after every
// scenario (lost = 0, doubled = 0, forged = 0).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3" // reads the gateway's database after a scenario
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stripe/stripe-go/v83/webhook"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

const (
	stripeSecret = "whsec_faults_provider_secret"
	wrongSecret  = "whsec_faults_wrong_secret"
	streamName   = "HOOKGATE_EVENTS"
)

// forgedMarker is in the body of every forged request, so a forged body
// is recognised wherever it shows up.
var forgedMarker = []byte(`"forged":true`)

// TestMain removes the binaries the scenarios share once they ran.
func TestMain(m *testing.M) {
	code := m.Run()
	gatewaytest.RemoveBinary()
	removeNATSBinary()
	os.Exit(code)
}

// ---------------------------------------------------------------------------
// Seeds and randomness.

// scenarioSeed returns FAULTS_SEED if set, else a fresh seed, and logs it
// with the command that replays the scenario.
func scenarioSeed(t *testing.T) uint64 {
	t.Helper()
	seed := rand.Uint64()
	if s := os.Getenv("FAULTS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("FAULTS_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d; replay: FAULTS_SEED=%d go test -race -count=1 -run '^%s$' ./test/faults/", seed, seed, t.Name())
	return seed
}

// rng is a goroutine-safe PCG generator; every random choice of a scenario
// comes from one derived from the scenario's seed.
type rng struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newRNG(seed, stream uint64) *rng {
	return &rng{r: rand.New(rand.NewPCG(seed, stream))}
}

func (r *rng) intn(n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.r.IntN(n)
}

func (r *rng) chance(p float64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.r.Float64() < p
}

// between returns a duration in [lo, hi].
func (r *rng) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return lo + time.Duration(r.r.Int64N(int64(hi-lo)+1))
}

func (r *rng) letters(n int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + r.r.IntN(26))
	}
	return string(b)
}

// ---------------------------------------------------------------------------
// Events and routes.

// event is one genuine provider event; its body never changes.
type event struct {
	ID, Type string
	Body     []byte
	Sum      [32]byte
}

var eventTypes = []string{"invoice.paid", "invoice.finalized", "customer.created", "charge.refunded"}

// routeSpec is a configured route and what the test expects it to match.
type routeSpec struct {
	name   string
	prefix string // event types it takes; "" takes every event
}

var testRoutes = []routeSpec{{name: "all"}, {name: "invoices", prefix: "invoice."}}

func (r routeSpec) matches(eventType string) bool { return strings.HasPrefix(eventType, r.prefix) }

func routeMatches(route, eventType string) bool {
	for _, r := range testRoutes {
		if r.name == route {
			return r.matches(eventType)
		}
	}
	return false
}

// ---------------------------------------------------------------------------
// The scenario: one gateway configuration and everything around it.

// gwConfig is what a scenario's gateway config is made of.
type gwConfig struct {
	Listen          string
	DataDir         string
	NATSPort        int    // embedded server's client port (when NATSURL is empty)
	NATSURL         string // external NATS
	StorePath       string // "" for <data_dir>/hookgate.db
	Downstream      string // base URL of the recording downstream
	RouteTimeout    time.Duration
	ShutdownTimeout time.Duration
	Wrap            []string // a command the binary runs under, e.g. prlimit
	Extra           string   // more top-level YAML, appended
	NATSStoreDir    string   // embedded server's store; "" for <data_dir>/jetstream
}

// schedule is the routes' long retry schedule: quick, and long enough
// (about 20s in all) that no delivery goes dead during a scenario's faults.
var schedule = []string{"200ms", "300ms", "500ms", "1s", "1s", "1s", "1s", "1s", "1s", "1s",
	"1s", "1s", "1s", "1s", "1s", "1s", "1s", "1s", "1s", "1s", "1s", "1s"}

func (c gwConfig) yaml() string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: %q\ndata_dir: %q\nshutdown_timeout: %s\nlog: {level: info}\n",
		c.Listen, c.DataDir, c.ShutdownTimeout)
	if c.NATSURL != "" {
		fmt.Fprintf(&b, "nats: {url: %q, connect_timeout: 2s}\n", c.NATSURL)
	} else if c.NATSStoreDir != "" {
		fmt.Fprintf(&b, "nats: {port: %d, store_dir: %q}\n", c.NATSPort, c.NATSStoreDir)
	} else {
		fmt.Fprintf(&b, "nats: {port: %d}\n", c.NATSPort)
	}
	// The WAL zero-filled, as README advises for production, and small,
	// so that scenarios also run where it restarts and is overwritten.
	b.WriteString("store: {wal_zero_fill: true, wal_max_mb: 16")
	if c.StorePath != "" {
		fmt.Fprintf(&b, ", path: %q", c.StorePath)
	}
	b.WriteString("}\n")
	fmt.Fprintf(&b, "sources:\n  - {name: stripe, verify: stripe, secrets: [%q]}\nroutes:\n", stripeSecret)
	for _, r := range testRoutes {
		fmt.Fprintf(&b, "  - name: %s\n    sources: [stripe]\n", r.name)
		if r.prefix != "" {
			fmt.Fprintf(&b, "    events: [%q]\n", r.prefix+"*")
		}
		fmt.Fprintf(&b, "    url: %q\n", c.Downstream+"/r/"+r.name)
		fmt.Fprintf(&b, "    timeout: %s\n    concurrency: 8\n    retries: 1\n", c.RouteTimeout)
		fmt.Fprintf(&b, "    retry_wait_min: 50ms\n    retry_wait_max: 1s\n")
		fmt.Fprintf(&b, "    breaker_threshold: 5\n    breaker_cooldown: 300ms\n")
		fmt.Fprintf(&b, "    schedule: [%s]\n", strings.Join(schedule, ", "))
	}
	b.WriteString(c.Extra)
	return b.String()
}

// dbPath is the SQLite file of the config.
func (c gwConfig) dbPath() string {
	if c.StorePath != "" {
		return c.StorePath
	}
	return filepath.Join(c.DataDir, "hookgate.db")
}

// natsURL is where the test inspects the stream.
func (c gwConfig) natsURL() string {
	if c.NATSURL != "" {
		return c.NATSURL
	}
	return fmt.Sprintf("nats://127.0.0.1:%d", c.NATSPort)
}

type scenario struct {
	t    *testing.T
	seed uint64
	rng  *rng // the scenario's own choices (kill moments, phases)
	dir  string
	cfg  gwConfig

	ds       *downstream
	provider *provider
	forger   *forger

	gw      *gatewaytest.Process
	runs    int
	drained time.Duration // how long verify waited for the last delivery

	mu     sync.Mutex
	events map[string]*event // every genuine event, by ID
	evRNG  *rng
}

// newScenario sets up a scenario; tweak may change the config before it
// is written. Nothing runs until start.
func newScenario(t *testing.T, tweak func(*gwConfig)) *scenario {
	t.Helper()
	seed := scenarioSeed(t)
	s := &scenario{t: t, seed: seed, rng: newRNG(seed, 1), dir: t.TempDir(),
		events: map[string]*event{}, evRNG: newRNG(seed, 2)}
	t.Cleanup(s.dumpLogsOnFailure) // runs last
	s.ds = newDownstream(t, newRNG(seed, 3))
	s.cfg = gwConfig{
		Listen:          fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		DataDir:         filepath.Join(s.dir, "data"),
		NATSPort:        freePort(t),
		Downstream:      s.ds.srv.URL,
		RouteTimeout:    2 * time.Second,
		ShutdownTimeout: 10 * time.Second,
	}
	if tweak != nil {
		tweak(&s.cfg)
	}
	if err := os.WriteFile(s.configPath(), []byte(s.cfg.yaml()), 0o600); err != nil {
		t.Fatal(err)
	}
	s.provider = newProvider("http://"+s.cfg.Listen+"/webhooks/stripe", newRNG(seed, 4), 24)
	s.forger = newForger("http://"+s.cfg.Listen+"/webhooks/stripe", newRNG(seed, 5))
	t.Cleanup(func() {
		if s.gw != nil {
			s.gw.Kill()
		}
	})
	t.Cleanup(s.provider.stop)
	t.Cleanup(s.forger.stop)
	return s
}

func (s *scenario) configPath() string { return filepath.Join(s.dir, "config.yaml") }

// newEvents makes n genuine events with IDs evt_<prefix>_<i>, each body
// padded with pad bytes more than usual.
func (s *scenario) newEvents(prefix string, n, pad int) []*event {
	s.mu.Lock()
	defer s.mu.Unlock()
	evs := make([]*event, n)
	for i := range evs {
		id := fmt.Sprintf("evt_%s_%05d", prefix, i)
		typ := eventTypes[s.evRNG.intn(len(eventTypes))]
		filler := s.evRNG.letters(16 + s.evRNG.intn(400) + pad)
		body := fmt.Sprintf(`{"id":%q,"object":"event","type":%q,"created":%d,"livemode":false,"data":{"object":{"n":%d,"pad":%q}}}`,
			id, typ, 1_700_000_000+i, i, filler)
		ev := &event{ID: id, Type: typ, Body: []byte(body), Sum: sha256.Sum256([]byte(body))}
		s.events[id] = ev
		evs[i] = ev
	}
	return evs
}

func (s *scenario) event(id string) *event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.events[id]
}

// dumpLogsOnFailure prints the end of every gateway log of a failed scenario.
func (s *scenario) dumpLogsOnFailure() {
	if !s.t.Failed() {
		return
	}
	for i := 1; i <= s.runs; i++ {
		path := s.logPath(i)
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 60 {
			lines = lines[len(lines)-60:]
		}
		s.t.Logf("--- gateway run %d, last %d log lines:\n%s", i, len(lines), strings.Join(lines, "\n"))
	}
}

func (s *scenario) logPath(run int) string {
	return filepath.Join(s.dir, fmt.Sprintf("gateway-%d.log", run))
}

func freePort(t *testing.T) int {
	t.Helper()
	return gatewaytest.FreePort(t)
}

// sleepUntil sleeps d, or less if stop closes first; it reports whether the
// full time passed.
func sleepUntil(stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop:
		return false
	case <-t.C:
		return true
	}
}

// ---------------------------------------------------------------------------
// The gateway process.

// start runs the binary and waits until it answers HTTP; its output goes
// to the run's log file.
func (s *scenario) start() {
	s.t.Helper()
	if s.gw != nil {
		s.t.Fatal("start: the gateway is already running")
	}
	s.runs++
	p, err := gatewaytest.Start(fmt.Sprintf("gateway run %d", s.runs),
		[]string{gatewaytest.Binary(s.t), "-config", s.configPath()},
		gatewaytest.Options{Wrap: s.cfg.Wrap, LogPath: s.logPath(s.runs)})
	if err != nil {
		s.t.Fatal(err)
	}
	s.gw = p
	if err := p.WaitHTTP("http://"+s.cfg.Listen+"/healthz", 30*time.Second); err != nil {
		if p.Exited() {
			s.gw = nil
		}
		s.t.Fatal(err)
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (s *scenario) kill() {
	s.t.Helper()
	if s.gw == nil {
		s.t.Fatal("kill: the gateway is not running")
	}
	s.gw.Kill()
	s.gw = nil
}

// stop sends SIGTERM and waits up to the shutdown timeout plus a margin;
// it returns the exit code and how long the shutdown took. A gateway that
// does not exit in time is an error (and is killed).
func (s *scenario) stop() (code int, took time.Duration) {
	s.t.Helper()
	g := s.gw
	if g == nil {
		s.t.Fatal("stop: the gateway is not running")
	}
	s.gw = nil
	start := time.Now()
	_ = g.Signal(syscall.SIGTERM)
	limit := s.cfg.ShutdownTimeout + 10*time.Second
	if !g.Wait(limit) {
		s.t.Errorf("gateway run %d did not exit within %s of SIGTERM", s.runs, limit)
		g.Kill()
	}
	return g.ExitCode(), time.Since(start)
}

// stopClean stops the gateway with SIGTERM and requires exit status 0.
func (s *scenario) stopClean() {
	s.t.Helper()
	if code, took := s.stop(); code != 0 {
		s.t.Errorf("gateway run %d exited with status %d after SIGTERM (took %s), want 0", s.runs, code, took)
	}
}

// ---------------------------------------------------------------------------
// The recording downstream.

// mode is how the downstream answers.
type mode int32

const (
	modeOK      mode = iota // 200
	modeFail                // 500
	modeHang                // no answer; the gateway's timeout cuts the request
	modeTooMany             // 429 with Retry-After: 1
	modeReset               // the connection is reset (Hijack and Close)
	modeFlaky               // a seeded mix of the above, mostly 200
)

func (m mode) String() string {
	return [...]string{"ok", "fail 500", "hang", "429 Retry-After", "reset", "flaky"}[m]
}

// request is one request the downstream received and what it answered.
type request struct {
	Route, Key, EventID, Source, Attempt string
	Sum                                  [32]byte
	Forged                               bool
	Status                               int    // answered status; 0 when none was
	Outcome                              string // answered, reset, hung, aborted
	At                                   time.Time
}

func (r request) ok() bool { return r.Status >= 200 && r.Status < 300 }

type downstream struct {
	srv     *httptest.Server
	rng     *rng
	mode    atomic.Int32
	latency atomic.Int64 // each answer waits a random time up to this
	quit    chan struct{}

	mu   sync.Mutex
	reqs []request
}

func newDownstream(t *testing.T, r *rng) *downstream {
	d := &downstream{rng: r, quit: make(chan struct{})}
	d.srv = httptest.NewServer(http.HandlerFunc(d.serve))
	t.Cleanup(func() {
		close(d.quit)
		d.srv.Close()
	})
	return d
}

func (d *downstream) set(m mode)                   { d.mode.Store(int32(m)) }
func (d *downstream) setLatency(max time.Duration) { d.latency.Store(int64(max)) }

func (d *downstream) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	req := request{
		Route:   strings.TrimPrefix(r.URL.Path, "/r/"),
		Key:     r.Header.Get("Idempotency-Key"),
		EventID: r.Header.Get("X-Hookgate-Event-Id"),
		Source:  r.Header.Get("X-Hookgate-Source"),
		Attempt: r.Header.Get("X-Hookgate-Attempt"),
		Sum:     sha256.Sum256(body),
		Forged:  bytes.Contains(body, forgedMarker),
		At:      time.Now(),
	}
	if err != nil {
		req.Outcome = "aborted"
		d.record(req)
		return
	}
	m := mode(d.mode.Load())
	if m == modeFlaky {
		switch n := d.rng.intn(100); {
		case n < 55:
			m = modeOK
		case n < 70:
			m = modeFail
		case n < 80:
			m = modeTooMany
		case n < 90:
			m = modeReset
		default:
			m = modeHang
		}
	}
	if max := time.Duration(d.latency.Load()); max > 0 {
		t := time.NewTimer(d.rng.between(0, max))
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			req.Outcome = "aborted" // the gateway gave up on the request
			d.record(req)
			return
		}
	}
	switch m {
	case modeHang:
		select {
		case <-r.Context().Done():
		case <-d.quit:
		case <-time.After(time.Minute):
		}
		req.Outcome = "hung"
		d.record(req)
		return
	case modeReset:
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			if tc, ok := conn.(*net.TCPConn); ok {
				tc.SetLinger(0) // RST, not FIN
			}
			conn.Close()
		}
		req.Outcome = "reset"
		d.record(req)
		return
	case modeTooMany:
		w.Header().Set("Retry-After", "1")
		req.Status = http.StatusTooManyRequests
	case modeFail:
		req.Status = http.StatusInternalServerError
	default:
		req.Status = http.StatusOK
	}
	w.WriteHeader(req.Status)
	req.Outcome = "answered"
	d.record(req)
}

func (d *downstream) record(r request) {
	d.mu.Lock()
	d.reqs = append(d.reqs, r)
	d.mu.Unlock()
}

func (d *downstream) snapshot() []request {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.reqs)
}

func (d *downstream) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.reqs)
}

// ---------------------------------------------------------------------------
// The provider simulator.

// provider sends Stripe-signed events the way Stripe does: each until it
// gets a 2xx (a refused connection or a 5xx means "retry later"), over many
// keep-alive connections, re-signing every attempt, with some deliberate
// repeats of events already acknowledged.
type provider struct {
	url     string
	rng     *rng
	clients []*http.Client
	queue   chan *event
	pending atomic.Int64
	quit    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once

	// RepeatP is the chance that an acknowledged event is sent once more.
	RepeatP float64

	mu            sync.Mutex
	acked         map[string]bool
	accepted      map[string]int    // "accepted" answers per event
	first         map[string]string // first 2xx answer per event
	requests      int
	statuses      map[int]int
	transportErrs int
	lastErr       string
	refused       []string // genuine events answered 4xx
}

func newProvider(url string, r *rng, conns int) *provider {
	p := &provider{url: url, rng: r, queue: make(chan *event, 1<<16), quit: make(chan struct{}), RepeatP: 0.1,
		acked: map[string]bool{}, accepted: map[string]int{}, first: map[string]string{}, statuses: map[int]int{}}
	for range conns {
		p.clients = append(p.clients, &http.Client{
			Timeout:   15 * time.Second,
			Transport: &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second, DisableCompression: true},
		})
	}
	return p
}

// start runs workers that take events from the queue, each pausing up to
// pace between events.
func (p *provider) start(workers int, pace time.Duration) {
	for i := range workers {
		c := p.clients[i%len(p.clients)]
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for {
				select {
				case <-p.quit:
					return
				case ev := <-p.queue:
					p.deliver(c, ev)
					p.pending.Add(-1)
					if pace > 0 && !sleepUntil(p.quit, p.rng.between(0, pace)) {
						return
					}
				}
			}
		}()
	}
}

// add queues events.
func (p *provider) add(evs ...*event) {
	p.pending.Add(int64(len(evs)))
	for _, ev := range evs {
		p.queue <- ev
	}
}

// burst sends copies of ev at the same moment over different connections,
// each copy retried until it gets a 2xx.
func (p *provider) burst(ev *event, copies int) {
	p.pending.Add(int64(copies))
	ready := make(chan struct{})
	for _, i := range p.distinctClients(copies) {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.pending.Add(-1)
			<-ready
			p.deliver(p.clients[i], ev)
		}()
	}
	close(ready)
}

func (p *provider) distinctClients(n int) []int {
	idx := make([]int, len(p.clients))
	for i := range idx {
		idx[i] = i
	}
	for i := len(idx) - 1; i > 0; i-- { // seeded shuffle
		j := p.rng.intn(i + 1)
		idx[i], idx[j] = idx[j], idx[i]
	}
	return idx[:min(n, len(idx))]
}

// deliver sends ev until it gets a 2xx or the provider stops.
func (p *provider) deliver(c *http.Client, ev *event) {
	for {
		select {
		case <-p.quit:
			return
		default:
		}
		a, err := p.send(c, ev)
		switch {
		case err != nil:
			sleepUntil(p.quit, p.rng.between(20*time.Millisecond, 60*time.Millisecond))
		case a.ok():
			return
		case a.code >= 500:
			sleepUntil(p.quit, p.rng.between(100*time.Millisecond, 200*time.Millisecond))
		default:
			sleepUntil(p.quit, 200*time.Millisecond)
		}
	}
}

// send posts ev once, freshly signed, and records the answer.
func (p *provider) send(c *http.Client, ev *event) (answer, error) {
	a, err := post(c, p.url, ev.Body, signed(ev.Body, stripeSecret, time.Time{}))
	p.mu.Lock()
	p.requests++
	switch {
	case err != nil:
		p.transportErrs++
		p.lastErr = err.Error()
	case a.code >= 400 && a.code < 500:
		p.refused = append(p.refused, fmt.Sprintf("%s: %d %s", ev.ID, a.code, a.status))
	}
	if err == nil {
		p.statuses[a.code]++
	}
	p.mu.Unlock()
	if a.ok() {
		p.acknowledged(ev, a.status)
	}
	return a, err
}

func (p *provider) acknowledged(ev *event, what string) {
	p.mu.Lock()
	repeat := !p.acked[ev.ID] && p.RepeatP > 0 && p.rng.chance(p.RepeatP)
	p.acked[ev.ID] = true
	if what == "accepted" {
		p.accepted[ev.ID]++
	}
	if p.first[ev.ID] == "" {
		p.first[ev.ID] = what
	}
	p.mu.Unlock()
	if repeat {
		p.pending.Add(1)
		select {
		case p.queue <- ev:
		default:
			p.pending.Add(-1)
		}
	}
}

// waitIdle waits until every queued event and burst got its 2xx.
func (p *provider) waitIdle(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for p.pending.Load() > 0 {
		if time.Now().After(deadline) {
			p.mu.Lock()
			defer p.mu.Unlock()
			return fmt.Errorf("%d sends still without a 2xx after %s (last transport error: %q, statuses %v)",
				p.pending.Load(), timeout, p.lastErr, p.statuses)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

func (p *provider) stop() {
	p.once.Do(func() { close(p.quit) })
	p.wg.Wait()
	for _, c := range p.clients {
		c.CloseIdleConnections()
	}
}

func (p *provider) ackedIDs() map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.acked)
}

// signed returns a Stripe-Signature header for body (at ts, or now).
func signed(body []byte, secret string, ts time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: ts}).Header
}

// answer is the gateway's answer to one webhook.
type answer struct {
	code       int
	status     string // the answer's "status" (accepted, duplicate) or error code
	retryAfter string
}

func (a answer) ok() bool { return a.code >= 200 && a.code < 300 }

// post sends one webhook with the given Stripe-Signature ("" for none).
func post(c *http.Client, url string, body []byte, sigHeader string) (answer, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if sigHeader != "" {
		req.Header.Set("Stripe-Signature", sigHeader)
	}
	resp, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	var parsed struct {
		Status string `json:"status"`
		Error  struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	json.Unmarshal(b, &parsed)
	a := answer{code: resp.StatusCode, status: parsed.Status, retryAfter: resp.Header.Get("Retry-After")}
	if a.status == "" {
		a.status = parsed.Error.Code
	}
	return a, nil
}

// ---------------------------------------------------------------------------
// The forger.

// forger sends requests that must fail verification: the wrong secret, a
// body changed after signing, a stale timestamp, no or a malformed
// signature, a signature in a scheme other than v1. Half use IDs of genuine
// events (with a different body), half IDs no genuine event has.
type forger struct {
	url    string
	rng    *rng
	client *http.Client
	quit   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once

	mu       sync.Mutex
	ids      map[string]bool // IDs only forgeries carry
	sent     int
	accepted []string // forgeries answered 2xx
}

func newForger(url string, r *rng) *forger {
	return &forger{url: url, rng: r, quit: make(chan struct{}), ids: map[string]bool{},
		client: &http.Client{Timeout: 10 * time.Second}}
}

// run sends a forgery every few milliseconds until stop, using IDs of the
// genuine events given.
func (f *forger) run(genuine []*event) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for n := 0; sleepUntil(f.quit, f.rng.between(5*time.Millisecond, 30*time.Millisecond)); n++ {
			f.forge(n, genuine)
		}
	}()
}

func (f *forger) forge(n int, genuine []*event) {
	id := fmt.Sprintf("evt_forged_%05d", n)
	if len(genuine) > 0 && f.rng.chance(0.5) {
		id = genuine[f.rng.intn(len(genuine))].ID
	} else {
		f.mu.Lock()
		f.ids[id] = true
		f.mu.Unlock()
	}
	body := []byte(fmt.Sprintf(`{"id":%q,"object":"event","type":"invoice.paid",%s,"data":{"object":{"amount":%d}}}`,
		id, forgedMarker, f.rng.intn(1_000_000)))
	var header string
	switch f.rng.intn(6) {
	case 0: // the wrong secret
		header = signed(body, wrongSecret, time.Time{})
	case 1: // signed, then the body changed in transit
		orig := bytes.Replace(body, forgedMarker, []byte(`"forged":false`), 1)
		header = signed(orig, stripeSecret, time.Time{})
	case 2: // right secret, timestamp an hour old (tolerance is 5m)
		header = signed(body, stripeSecret, time.Now().Add(-time.Hour))
	case 3: // no signature at all
	case 4: // malformed
		header = "t=notanumber,v1=zz"
	case 5: // right secret, but only a v0 signature
		header = webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: stripeSecret, Scheme: "v0"}).Header
	}
	a, err := post(f.client, f.url, body, header)
	if err != nil {
		return // the gateway is down
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent++
	if a.ok() {
		f.accepted = append(f.accepted, fmt.Sprintf("%s (%d %s)", id, a.code, a.status))
	}
}

func (f *forger) stop() {
	f.once.Do(func() { close(f.quit) })
	f.wg.Wait()
}

func (f *forger) forgedOnly(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ids[id]
}

// ---------------------------------------------------------------------------
// The audit.

// audit is what the downstream saw, judged against what the provider was
// told.
type audit struct {
	acked, deliveries, ok int
	lost, doubled         int
	forged, corrupt       int
	examples              map[string][]string
}

func (a *audit) note(kind, format string, args ...any) {
	if len(a.examples[kind]) < 5 {
		a.examples[kind] = append(a.examples[kind], fmt.Sprintf(format, args...))
	}
}

func (s *scenario) audit() audit {
	a := audit{examples: map[string][]string{}}
	acked := s.provider.ackedIDs()
	reqs := s.ds.snapshot()
	a.acked, a.deliveries = len(acked), len(reqs)
	type pair struct{ route, id string }
	delivered := map[pair]bool{}
	keysOf := map[pair]map[string]bool{}
	bodiesOf := map[string]map[[32]byte]bool{}
	pairsOf := map[string]map[pair]bool{}
	for _, r := range reqs {
		p := pair{r.Route, r.EventID}
		ev := s.event(r.EventID)
		switch {
		case r.Forged || ev == nil || s.forger.forgedOnly(r.EventID):
			a.forged++
			a.note("forged", "route %s received %s (key %s, forged body %v)", r.Route, r.EventID, r.Key, r.Forged)
		case r.Sum != ev.Sum:
			a.corrupt++
			a.note("corrupt", "route %s received %s with a body that is not the event's", r.Route, r.EventID)
		case !routeMatches(r.Route, ev.Type) || r.Source != "stripe" || r.Key == "":
			a.corrupt++
			a.note("corrupt", "route %s received %s (type %s, source %q, key %q)", r.Route, r.EventID, ev.Type, r.Source, r.Key)
		case r.ok():
			delivered[p] = true
			a.ok++
		}
		if keysOf[p] == nil {
			keysOf[p] = map[string]bool{}
		}
		keysOf[p][r.Key] = true
		if bodiesOf[r.Key] == nil {
			bodiesOf[r.Key], pairsOf[r.Key] = map[[32]byte]bool{}, map[pair]bool{}
		}
		bodiesOf[r.Key][r.Sum] = true
		pairsOf[r.Key][p] = true
	}
	for p, keys := range keysOf {
		if len(keys) > 1 {
			a.doubled++
			a.note("doubled", "route %s, event %s: %d Idempotency-Keys %v", p.route, p.id, len(keys), slices.Sorted(maps.Keys(keys)))
		}
	}
	for k, bodies := range bodiesOf {
		if len(bodies) > 1 || len(pairsOf[k]) > 1 {
			a.doubled++
			a.note("doubled", "Idempotency-Key %s carried %d bodies for %d (route, event) pairs", k, len(bodies), len(pairsOf[k]))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(acked)) {
		ev := s.event(id)
		for _, rt := range testRoutes {
			if rt.matches(ev.Type) && !delivered[pair{rt.name, id}] {
				a.lost++
				a.note("lost", "event %s (%s) acknowledged but never answered 2xx by route %s", id, ev.Type, rt.name)
			}
		}
	}
	return a
}

// verifyOpts tunes verify.
type verifyOpts struct {
	// streamOnce: every acknowledged event is in the stream exactly once
	// (not so after a wiped store, where it is published anew).
	streamOnce bool
	// keepRunning leaves the gateway running (else it is stopped with
	// SIGTERM and the database checked).
	keepRunning bool
}

// verify waits for the provider to be done and every acknowledged event
// to be delivered (the gateway must be running, the downstream answering
// 200), then checks lost = 0, doubled = 0, forged = 0 and the stream and
// the database.
func (s *scenario) verify(o verifyOpts) {
	t := s.t
	t.Helper()
	s.ds.set(modeOK)
	s.ds.setLatency(0)
	if err := s.provider.waitIdle(90 * time.Second); err != nil {
		t.Errorf("provider: %v", err)
	}
	// Stopping the provider closes its spare keep-alive connections: one
	// that never carried a request would hold up the final SIGTERM (see
	// TestGracefulShutdownUnderLoad/idle_connection).
	s.provider.stop()
	s.forger.stop()
	// Deliveries cut by a SIGKILL come back after the consumer's AckWait
	// (30s), so allow well beyond it.
	drainStart := time.Now()
	deadline := drainStart.Add(100 * time.Second)
	a := s.audit()
	for a.lost > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		a = s.audit()
	}
	s.drained = time.Since(drainStart)
	// Late deliveries under a second key would show up now.
	time.Sleep(300 * time.Millisecond)
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

	p := s.provider
	p.mu.Lock()
	for id, n := range p.accepted {
		if n > 1 {
			t.Errorf("event %s was answered \"accepted\" %d times: an acknowledged event was not durably stored", id, n)
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

	s.checkStream(o.streamOnce)
	t.Logf("%d events acknowledged; %s; %d forgeries refused; downstream: %d requests, %d answered 2xx, all delivered %s after the load; %d gateway runs; lost=%d doubled=%d forged=%d",
		a.acked, intake, forgeries, a.deliveries, a.ok, s.drained.Round(time.Millisecond), s.runs, a.lost, a.doubled, a.forged)

	if !o.keepRunning {
		s.stopClean()
		s.checkDB()
	}
}

// checkStream reads the events stream: no forged event is in it. With
// once, each acknowledged event was stored in the stream exactly once: the
// stream's sequence (messages ever stored; the stream is this scenario's
// own) equals the number of acknowledged events, no event is in it twice,
// and, when the stream keeps every message (limits retention), each
// acknowledged event is in it. An interest stream drops what every
// consumer acknowledged, so there only the first two can be checked.
func (s *scenario) checkStream(once bool) {
	t := s.t
	t.Helper()
	st, err := readStream(s.cfg.natsURL())
	if err != nil {
		t.Errorf("read the stream: %v", err)
		return
	}
	forged := st.forged
	for id, n := range st.counts {
		if s.forger.forgedOnly(id) || s.event(id) == nil {
			forged += n
		}
	}
	if forged > 0 {
		t.Errorf("forged = %d: forged events are in the stream", forged)
	}
	if !once {
		return
	}
	acked := s.provider.ackedIDs()
	if st.lastSeq != uint64(len(acked)) {
		t.Errorf("the stream stored %d messages for %d acknowledged events, want one each", st.lastSeq, len(acked))
	}
	bad := 0
	for id := range acked {
		n := st.counts[id]
		if n > 1 || (n == 0 && st.keepsAll) {
			if bad++; bad <= 5 {
				t.Errorf("acknowledged event %s is in the stream %d times, want 1", id, n)
			}
		}
	}
	if bad > 5 {
		t.Errorf("... %d acknowledged events in all are not in the stream exactly once", bad)
	}
}

// streamState is what readStream found.
type streamState struct {
	counts   map[string]int // messages per event ID
	forged   int            // messages with a forged body
	lastSeq  uint64         // messages ever stored
	keepsAll bool           // limits retention: no message is removed
}

func readStream(url string) (*streamState, error) {
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	str, err := js.Stream(ctx, streamName)
	if err != nil {
		return nil, err
	}
	info, err := str.Info(ctx)
	if err != nil {
		return nil, err
	}
	st := &streamState{counts: map[string]int{}, lastSeq: info.State.LastSeq,
		keepsAll: info.Config.Retention == natsjs.LimitsPolicy}
	if info.State.Msgs == 0 {
		return st, nil
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := str.GetMsg(ctx, seq)
		if errors.Is(err, natsjs.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", seq, err)
		}
		st.counts[m.Header.Get("Hookgate-Event-Id")]++
		if bytes.Contains(m.Data, forgedMarker) {
			st.forged++
		}
	}
	return st, nil
}

// checkDB opens the stopped gateway's database: it is intact, holds every
// acknowledged event with its exact body, and no forgery.
func (s *scenario) checkDB() {
	t := s.t
	t.Helper()
	db, err := openDB(s.cfg.dbPath())
	if err != nil {
		t.Errorf("open the database: %v", err)
		return
	}
	defer db.Close()
	var integrity string
	if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&integrity); err != nil || integrity != "ok" {
		t.Errorf("database integrity_check: %q %v", integrity, err)
	}
	stored, err := storedEvents(db)
	if err != nil {
		t.Errorf("read events: %v", err)
		return
	}
	for id, sum := range stored {
		ev := s.event(id)
		switch {
		case ev == nil || s.forger.forgedOnly(id):
			t.Errorf("forged: the database holds event %s, which only forgeries carried", id)
		case sum != ev.Sum:
			t.Errorf("the database holds event %s with a body that is not the genuine one", id)
		}
	}
	for id := range s.provider.ackedIDs() {
		if _, ok := stored[id]; !ok {
			t.Errorf("lost: acknowledged event %s is not in the database", id)
		}
	}
}

func openDB(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite3", "file:"+path+"?mode=ro&_busy_timeout=5000")
	if err != nil {
		return nil, err
	}
	return db, db.Ping()
}

// storedEvents returns the body hash of every stored event by ID.
func storedEvents(db *sql.DB) (map[string][32]byte, error) {
	rows, err := db.Query(`SELECT event_id, body FROM events WHERE source = 'stripe'`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][32]byte{}
	for rows.Next() {
		var id string
		var body []byte
		if err := rows.Scan(&id, &body); err != nil {
			return nil, err
		}
		out[id] = sha256.Sum256(body)
	}
	return out, rows.Err()
}

// logContains reports whether a gateway run's log has a line containing s.
func (s *scenario) logContains(run int, substr string) bool {
	f, err := os.Open(s.logPath(run))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), substr) {
			return true
		}
	}
	return false
}
