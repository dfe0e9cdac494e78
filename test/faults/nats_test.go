package faults

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// natsServer is an external nats-server with JetStream, run in the test
// process on a fixed port with a file store that survives restarts.
type natsServer struct {
	t          *testing.T
	port       int
	dir        string
	maxPayload int32 // 0: nats-server's default (1 MiB)
	srv        *server.Server
}

func (n *natsServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

func (n *natsServer) start() {
	n.t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: n.port, JetStream: true,
		StoreDir: n.dir, NoSigs: true, NoLog: true, MaxPayload: n.maxPayload})
	if err != nil {
		n.t.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		n.t.Fatal("nats-server not ready after 10s")
	}
	n.srv = srv
}

func (n *natsServer) shutdown() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
}

// Scenario 3: an external nats-server shut down and restarted mid-load,
// twice. Intake keeps answering 2xx throughout (SQLite is the record), and
// every acknowledged event is delivered, once per route and key, and in
// the stream exactly once.
func TestNATSOutage(t *testing.T) {
	t.Parallel()
	ns := &natsServer{t: t, port: freePort(t), dir: filepath.Join(t.TempDir(), "nats")}
	ns.start()
	t.Cleanup(ns.shutdown)
	s := newScenario(t, func(c *gwConfig) { c.NATSURL = ns.url() })
	const outages, perStep = 2, 60
	all := s.newEvents("n", perStep*(2*outages+1), 0)
	rest := all
	next := func() []*event { b := rest[:perStep]; rest = rest[perStep:]; return b }
	s.ds.setLatency(20 * time.Millisecond)
	s.start()
	s.provider.start(6, 30*time.Millisecond)
	s.forger.run(all)
	s.provider.add(next()...)
	for i := range outages {
		time.Sleep(s.rng.between(200*time.Millisecond, 800*time.Millisecond)) // load before the outage
		ns.shutdown()
		s.provider.add(next()...)
		down := s.rng.between(500*time.Millisecond, 2*time.Second)
		time.Sleep(down) // the outage
		ns.start()
		t.Logf("outage %d: nats-server down for %s", i, down)
		s.provider.add(next()...)
	}
	s.verify(verifyOpts{streamOnce: true, keepRunning: true})
	p := s.provider
	p.mu.Lock()
	if p.transportErrs > 0 || len(p.statuses) != 1 || p.statuses[200] == 0 {
		t.Errorf("intake did not answer 2xx throughout the NATS outages: %d transport errors (last %q), statuses %v",
			p.transportErrs, p.lastErr, p.statuses)
	}
	p.mu.Unlock()
	s.stopClean()
	s.checkDB()
}
