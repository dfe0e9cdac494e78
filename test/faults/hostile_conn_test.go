package faults

import (
	"io"
	"net"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// Scenario 8: hostile connections beside genuine traffic. The gateway runs
// with an open-file limit of 256; while the provider sends events, 400
// idle connections and 300 slow bodies (each declaring 1 MiB, sending 10
// bytes every 2s) are opened, more than the gateway may hold. The gateway
// neither exits nor grows past 300 MB RSS; senders already connected keep
// being answered; once the hostile connections close, everything
// acknowledged is delivered (lost = 0, doubled = 0, forged = 0).
func TestHostileConnections(t *testing.T) {
	t.Parallel()
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("prlimit (util-linux) is not installed")
	}
	s := newScenario(t, func(c *gwConfig) { c.Wrap = []string{prlimit, "--nofile=256:256"} })
	before := s.newEvents("h0", 100, 0)
	during := s.newEvents("h1", 150, 0)
	after := s.newEvents("h2", 50, 0)
	s.start()
	pid := s.gw.Pid()
	s.provider.start(8, 5*time.Millisecond)
	s.forger.run(append(append(before, during...), after...))
	s.provider.add(before...)
	if err := s.provider.waitIdle(60 * time.Second); err != nil {
		t.Fatal(err)
	}

	flood := newFlood(s.cfg.Listen)
	t.Cleanup(flood.close)
	idle, slow := flood.open(400, 300)
	t.Logf("hostile connections open: %d idle, %d slow bodies", idle, slow)
	s.provider.add(during...)

	peak := int64(0)
	for range 8 { // 8s, about 4 rounds of slow-body bytes
		time.Sleep(time.Second)
		select {
		case <-s.gw.Done():
			t.Fatalf("the gateway exited under hostile connections: %v", s.gw.Err())
		default:
		}
		peak = max(peak, rss(t, pid))
	}
	if peak > 300<<20 {
		t.Errorf("RSS reached %d MB under hostile connections, want under 300 MB", peak>>20)
	}
	flood.close()
	t.Logf("hostile connections closed; peak RSS %d MB", peak>>20)

	s.provider.add(after...)
	s.verify(verifyOpts{streamOnce: true})
}

// flood holds idle connections and slow bodies open.
type flood struct {
	addr  string
	quit  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func newFlood(addr string) *flood { return &flood{addr: addr, quit: make(chan struct{})} }

// open opens idle connections that send nothing and slow bodies that
// declare 1 MiB and send 10 bytes every 2s; it returns how many of each
// it opened (a dial that fails is not retried).
func (f *flood) open(idle, slow int) (int, int) {
	head := "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
		"Stripe-Signature: t=1,v1=00\r\nContent-Length: 1048576\r\n\r\n"
	var nIdle, nSlow int
	for i := 0; i < idle+slow; i++ {
		c, err := net.DialTimeout("tcp", f.addr, 5*time.Second)
		if err != nil {
			continue
		}
		f.mu.Lock()
		f.conns = append(f.conns, c)
		f.mu.Unlock()
		if i < idle {
			nIdle++
			continue
		}
		if _, err := io.WriteString(c, head); err != nil {
			continue
		}
		nSlow++
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for sleepUntil(f.quit, 2*time.Second) {
				if _, err := c.Write([]byte("0123456789")); err != nil {
					return
				}
			}
		}()
	}
	return nIdle, nSlow
}

func (f *flood) close() {
	f.once.Do(func() { close(f.quit) })
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
}

// rss is the resident set size of pid in bytes.
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	n, _, err := gatewaytest.Memory(pid)
	if err != nil {
		t.Fatalf("read the gateway's status: %v", err)
	}
	return n
}
