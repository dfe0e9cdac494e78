package faults

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// Scenario 13: cluster mode on a 3-node NATS cluster of nats-server
// processes, 2 gateways behind the load balancer, each event sent as 2–3
// copies to random gateways, events sent from the start until after the
// last fault (33s at least). Under load: the node leading HOOKGATE_CLAIMS
// is SIGKILLed and restarted; gateway 1's NATS connections are frozen (a
// silent partition: nothing passes either way, nothing is closed) while
// gateway 0 runs, then thawed; the node leading the events stream is
// SIGKILLed and restarted with its store wiped; then the one leading
// HOOKGATE_DELIVERIES and another are SIGKILLed mid-round, restarted 12s
// later (no quorum meanwhile). lost, doubled and
// forged = 0, no (route, event) answered 2xx is sent again, one operator
// view.
func TestClusterNATSNodesKilled(t *testing.T) {
	t.Parallel()
	nn := startNATSNodes(t, 3)
	// Gateway 1 reaches every node through a proxy that can be frozen.
	var proxies []*freezeProxy
	var viaProxies []string
	for _, u := range nn.urls {
		p := newFreezeProxy(t, strings.TrimPrefix(u, "nats://"))
		proxies = append(proxies, p)
		viaProxies = append(viaProxies, "nats://"+p.addr())
	}
	cs := newClusterScenarioOn(t, nn.url(), []string{"", strings.Join(viaProxies, ",")}, nn.leaderOf, 2)
	s := cs.s
	evs := s.newEvents("nn", 300, 0)
	s.ds.setLatency(100 * time.Millisecond) // rounds in flight at each fault
	for i := range cs.gws {
		cs.start(i)
	}
	cs.waitStreamLeader()
	s.provider.start(16, 0)
	s.forger.run(evs)
	fed := time.Now()
	// Over 33s at least, and until after the last fault, however long
	// each step waits: every fault under load.
	stopFeed := cs.feed(evs, "nn", 100*time.Millisecond)
	t.Cleanup(stopFeed)
	at := func() string {
		return fmt.Sprintf("%s into the load (%d sends pending, %d downstream requests)",
			time.Since(fed).Round(time.Millisecond), s.provider.pending.Load(), s.ds.count())
	}

	time.Sleep(s.rng.between(1*time.Second, 2*time.Second))
	n := nn.killLeader(claimsStream)
	t.Logf("%s: SIGKILL n%d, %s's leader", at(), n+1, claimsStream)
	time.Sleep(s.rng.between(500*time.Millisecond, 1500*time.Millisecond))
	nn.start(n)
	t.Logf("%s: n%d back", at(), n+1)

	for _, p := range proxies {
		p.freeze()
	}
	frozen := s.rng.between(2*time.Second, 4*time.Second)
	t.Logf("%s: gateway 1's NATS connections frozen for %s", at(), frozen)
	time.Sleep(frozen)
	for _, p := range proxies {
		p.thaw()
	}
	t.Logf("%s: thawed", at())

	n = nn.killLeader(streamName)
	nn.wipe(n)
	t.Logf("%s: SIGKILL n%d, %s's leader, its store wiped", at(), n+1, streamName)
	time.Sleep(s.rng.between(500*time.Millisecond, 1500*time.Millisecond))
	nn.start(n)
	t.Logf("%s: n%d back, empty", at(), n+1)

	// Two nodes at once, the delivery-state bucket's leader among them: no
	// quorum for longer than a round's outcome and its release each wait
	// (cluster.DefaultWait), while rounds are in flight.
	gatewaytest.WaitFor(t, "a request in flight", 20*time.Second, func() (bool, string) {
		return cs.front.inFlight("gw0")+cs.front.inFlight("gw1") > 0, "none"
	})
	n = nn.leaderOf(deliveriesStream)
	if n < 0 {
		n = 0
	}
	other := (n + 1) % 3
	nn.kill(n)
	nn.kill(other)
	lost := 12 * time.Second
	t.Logf("%s: SIGKILL n%d (%s's leader) and n%d: no quorum for %s", at(), n+1, deliveriesStream, other+1, lost)
	time.Sleep(lost)
	nn.spawn(n)
	nn.spawn(other)
	nn.waitHealthy(n)
	nn.waitHealthy(other)
	t.Logf("%s: n%d and n%d back", at(), n+1, other+1)

	stopFeed()
	cs.verify(-1, time.Time{})
}

// claimsStream is the stream of the claims KV bucket.
const claimsStream = "KV_HOOKGATE_CLAIMS"

// feed sends 2 or 3 copies of each event (an event every spacing) at
// moments of the seed spread over 3s, past the duplicate window: evs
// first, then events it makes as it goes (IDs evt_<prefix><n>_…), so
// that load goes on arriving however long the faults take. The returned
// stop waits until every copy of evs is sent, then stops the feeder and
// waits for it.
func (cs *clusterScenario) feed(evs []*event, prefix string, spacing time.Duration) (stop func()) {
	s := cs.s
	rng := newRNG(s.seed, 10)
	type send struct {
		at    time.Duration
		ev    *event
		first bool // a copy of evs
	}
	quit, done, firstSent := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		start := time.Now()
		var pending []send // by at
		batch, next, firstLeft := evs, 0, 0
		for i := 0; ; {
			// Plan every event whose copies may come before the next send.
			for len(pending) == 0 || time.Duration(i)*spacing <= pending[0].at {
				if next == len(batch) {
					batch, next = s.newEvents(fmt.Sprintf("%s%d", prefix, i/len(evs)), len(evs), 0), 0
				}
				base := time.Duration(i) * spacing
				for range 2 + rng.intn(2) {
					pending = append(pending, send{base + rng.between(0, 3*time.Second), batch[next], i < len(evs)})
					if i < len(evs) {
						firstLeft++
					}
				}
				next++
				i++
				slices.SortStableFunc(pending, func(a, b send) int { return int(a.at - b.at) })
			}
			p := pending[0]
			pending = pending[1:]
			if !sleepUntil(quit, time.Until(start.Add(p.at))) {
				return
			}
			s.provider.add(p.ev)
			if p.first {
				if firstLeft--; firstLeft == 0 && i >= len(evs) {
					close(firstSent)
				}
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			<-firstSent
			close(quit)
		})
		<-done
	}
}

// natsNodes is a JetStream cluster of nats-server processes (the module's
// own nats-server, built per test), routed on 127.0.0.1, each with a store
// of its own. A node can be SIGKILLed, as a crashed node is (an in-process
// server's Shutdown hands its leaderships over first), and started again
// on its ports and store.
type natsNodes struct {
	t       *testing.T
	bin     string
	urls    []string
	routes  []string
	monitor []int
	dirs    []string
	procs   []*gatewaytest.Process // nil while killed
	runs    []int
	logDir  string
	spawner chan func() // runs each start on one locked thread
}

var (
	natsBinOnce sync.Once
	natsBin     string
	natsBinErr  error
)

// removeNATSBinary removes the nats-server binary, if built.
func removeNATSBinary() {
	if natsBin != "" {
		_ = os.RemoveAll(filepath.Dir(natsBin))
	}
}

func startNATSNodes(t *testing.T, n int) *natsNodes {
	t.Helper()
	natsBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hookgate-nats-bin")
		if err != nil {
			natsBinErr = err
			return
		}
		natsBin = filepath.Join(dir, "nats-server")
		if out, err := exec.Command("go", "build", "-o", natsBin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
			natsBinErr = fmt.Errorf("go build nats-server: %w\n%s", err, out)
		}
	})
	if natsBinErr != nil {
		t.Fatal(natsBinErr)
	}
	base := t.TempDir()
	nn := &natsNodes{t: t, bin: natsBin, procs: make([]*gatewaytest.Process, n), runs: make([]int, n), logDir: base}
	for i := range n {
		nn.urls = append(nn.urls, fmt.Sprintf("nats://127.0.0.1:%d", freePort(t)))
		nn.routes = append(nn.routes, fmt.Sprintf("nats://127.0.0.1:%d", freePort(t)))
		nn.monitor = append(nn.monitor, freePort(t))
		nn.dirs = append(nn.dirs, filepath.Join(base, fmt.Sprintf("n%d", i+1)))
	}
	// A process started with DieWithParent is SIGKILLed when the thread
	// that started it exits, and Go may end an idle thread: every node is
	// started from one goroutine locked to its thread, which ends (and so
	// kills the nodes left) with the test.
	nn.spawner = make(chan func())
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		for f := range nn.spawner {
			f()
		}
	}()
	t.Cleanup(func() {
		for i := range nn.procs {
			nn.kill(i)
		}
		close(nn.spawner)
	})
	t.Cleanup(nn.dumpLogsOnFailure) // runs first: the logs are still there
	for i := range n {
		nn.spawn(i)
	}
	for i := range n {
		nn.waitHealthy(i)
	}
	return nn
}

func (nn *natsNodes) url() string { return strings.Join(nn.urls, ",") }

func (nn *natsNodes) logPath(i, run int) string {
	return filepath.Join(nn.logDir, fmt.Sprintf("n%d-%d.log", i+1, run))
}

func (nn *natsNodes) spawn(i int) {
	t := nn.t
	t.Helper()
	nn.runs[i]++
	port := strings.TrimPrefix(nn.urls[i], "nats://127.0.0.1:")
	argv := []string{nn.bin,
		"-n", fmt.Sprintf("n%d", i+1), "-a", "127.0.0.1", "-p", port,
		"-m", fmt.Sprint(nn.monitor[i]), "-js", "-sd", nn.dirs[i],
		"--cluster_name", "hookgate-faults", "--cluster", nn.routes[i], "--routes", strings.Join(nn.routes, ","),
	}
	var p *gatewaytest.Process
	var err error
	done := make(chan struct{})
	nn.spawner <- func() {
		defer close(done)
		p, err = gatewaytest.Start(fmt.Sprintf("n%d", i+1), argv,
			gatewaytest.Options{DieWithParent: true, LogPath: nn.logPath(i, nn.runs[i])})
	}
	<-done
	if err != nil {
		t.Fatal(err)
	}
	nn.procs[i] = p
}

// start starts node i again and waits until it is current.
func (nn *natsNodes) start(i int) {
	nn.t.Helper()
	nn.spawn(i)
	nn.waitHealthy(i)
}

func (nn *natsNodes) kill(i int) {
	if p := nn.procs[i]; p != nil {
		p.Kill()
		nn.procs[i] = nil
	}
}

// wipe removes killed node i's store.
func (nn *natsNodes) wipe(i int) {
	nn.t.Helper()
	if nn.procs[i] != nil {
		nn.t.Fatalf("wipe: n%d is running", i+1)
	}
	if err := os.RemoveAll(nn.dirs[i]); err != nil {
		nn.t.Fatal(err)
	}
}

// waitHealthy waits until node i's /healthz is 200: JetStream current
// with the meta leader and its streams.
func (nn *natsNodes) waitHealthy(i int) {
	nn.t.Helper()
	gatewaytest.WaitFor(nn.t, fmt.Sprintf("nats-server n%d healthy", i+1), 60*time.Second, func() (bool, string) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", nn.monitor[i]))
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 200, fmt.Sprintf("%d %s", resp.StatusCode, b)
	})
}

// leaderOf is the index of the node leading stream, -1 if none answers.
func (nn *natsNodes) leaderOf(stream string) int {
	nc, err := nats.Connect(nn.url(), nats.Timeout(2*time.Second))
	if err != nil {
		return -1
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return -1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	str, err := js.Stream(ctx, stream)
	if err != nil {
		return -1
	}
	info, err := str.Info(ctx)
	if err != nil || info.Cluster == nil {
		return -1
	}
	for i := range nn.procs {
		if info.Cluster.Leader == fmt.Sprintf("n%d", i+1) {
			return i
		}
	}
	return -1
}

// killLeader SIGKILLs the node leading stream and returns its index once
// another node leads it.
func (nn *natsNodes) killLeader(stream string) int {
	t := nn.t
	t.Helper()
	n := -1
	gatewaytest.WaitFor(t, "a leader of "+stream, 30*time.Second, func() (bool, string) {
		n = nn.leaderOf(stream)
		return n >= 0, "none"
	})
	nn.kill(n)
	gatewaytest.WaitFor(t, "a new leader of "+stream, 60*time.Second, func() (bool, string) {
		l := nn.leaderOf(stream)
		return l >= 0 && l != n, fmt.Sprint(l)
	})
	return n
}

func (nn *natsNodes) dumpLogsOnFailure() {
	if !nn.t.Failed() {
		return
	}
	for i := range nn.runs {
		for run := 1; run <= nn.runs[i]; run++ {
			b, err := os.ReadFile(nn.logPath(i, run))
			if err != nil {
				continue
			}
			lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
			lines = lines[max(0, len(lines)-15):]
			nn.t.Logf("--- n%d run %d, last %d log lines:\n%s", i+1, run, len(lines), strings.Join(lines, "\n"))
		}
	}
}

// freezeProxy forwards TCP connections to a target. Frozen, it passes
// nothing either way and closes nothing, as a network partition does:
// what is read meanwhile is held and passed on the thaw, and a new
// connection is accepted and held too.
type freezeProxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	cond   *sync.Cond
	frozen bool
	conns  map[net.Conn]bool
	closed bool
}

func newFreezeProxy(t *testing.T, target string) *freezeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezeProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.cond = sync.NewCond(&p.mu)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *freezeProxy) addr() string { return p.ln.Addr().String() }

func (p *freezeProxy) freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
}

func (p *freezeProxy) thaw() {
	p.mu.Lock()
	p.frozen = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// pass waits while frozen; false once closed.
func (p *freezeProxy) pass() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.frozen && !p.closed {
		p.cond.Wait()
	}
	return !p.closed
}

func (p *freezeProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = true
	return true
}

func (p *freezeProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		go func() {
			if !p.pass() {
				return
			}
			up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
			if err != nil {
				c.Close() // the node is down: refused, as it would be
				return
			}
			if !p.track(up) {
				return
			}
			go p.copy(up, c)
			p.copy(c, up)
		}()
	}
}

// copy passes src to dst, held while frozen, and closes both at the end.
func (p *freezeProxy) copy(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.pass() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *freezeProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}
