package gatewaytest

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NATSCluster is an in-process NATS cluster with JetStream: n servers
// routed to each other on 127.0.0.1, each storing under its own
// t.TempDir(). Servers can be stopped and started again on the same ports
// and stores.
type NATSCluster struct {
	// Servers are the running servers; a stopped one stays at its index.
	Servers []*server.Server
	// URL lists every server's client URL, comma-joined (nats.url).
	URL  string
	opts []*server.Options
}

// RunNATSCluster starts an n-node JetStream cluster and waits until its
// meta leader is elected; it shuts the cluster down when the test ends.
// Clients connect on ports the kernel picks as each server binds them; a
// route port found free may be taken before its server binds it (on a
// busy machine, by any connection's local port), so a cluster that does
// not start is started again on other ports. A server started again
// keeps its ports.
func RunNATSCluster(t testing.TB, n int) *NATSCluster {
	t.Helper()
	c := &NATSCluster{Servers: make([]*server.Server, n)}
	base := t.TempDir() // before the cleanup below, so removed after it ran
	t.Cleanup(func() {
		for i := range c.Servers {
			c.Stop(i)
		}
	})
	for try := 1; ; try++ {
		err := c.startAll(t, n, filepath.Join(base, fmt.Sprint(try)))
		if err == nil {
			break
		}
		for i := range c.Servers {
			c.Stop(i)
		}
		if try == 3 {
			t.Fatal(err)
		}
		t.Logf("%v; starting the cluster again on other ports", err)
	}
	urls := make([]string, n)
	for i, o := range c.opts {
		urls[i] = fmt.Sprintf("nats://127.0.0.1:%d", o.Port)
	}
	c.URL = strings.Join(urls, ",")
	c.WaitLeader(t)
	return c
}

// startAll starts n servers with stores under dir, route ports found
// free, and client ports the kernel picks.
func (c *NATSCluster) startAll(t testing.TB, n int, dir string) error {
	cluster := make([]int, n)
	var routes []string
	for i := range n {
		cluster[i] = FreePort(t)
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", cluster[i]))
	}
	c.opts = c.opts[:0]
	for i := range n {
		var rs []*url.URL
		for j, r := range routes {
			if j != i {
				u, err := url.Parse(r)
				if err != nil {
					return err
				}
				rs = append(rs, u)
			}
		}
		c.opts = append(c.opts, &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1", Port: server.RANDOM_PORT,
			Cluster:   server.ClusterOpts{Name: "hookgate-test", Host: "127.0.0.1", Port: cluster[i]},
			Routes:    rs,
			JetStream: true, StoreDir: filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			NoSigs: true, NoLog: true,
		})
	}
	for i := range n {
		if err := c.start(i); err != nil {
			return err
		}
	}
	return nil
}

// Start starts server i (again), on its ports and store, and waits until
// it takes connections.
func (c *NATSCluster) Start(t testing.TB, i int) {
	t.Helper()
	if err := c.start(i); err != nil {
		t.Fatal(err)
	}
}

func (c *NATSCluster) start(i int) error {
	o := *c.opts[i]
	srv, err := server.NewServer(&o)
	if err != nil {
		return err
	}
	srv.Start()
	if !srv.ReadyForConnections(20 * time.Second) {
		srv.Shutdown()
		return fmt.Errorf("nats-server %s not ready", o.ServerName)
	}
	c.Servers[i] = srv
	c.opts[i].Port = srv.Addr().(*net.TCPAddr).Port // kept for a restart
	return nil
}

// Stop shuts server i down (if running) and waits until it has.
func (c *NATSCluster) Stop(i int) {
	if s := c.Servers[i]; s != nil {
		s.Shutdown()
		s.WaitForShutdown()
		c.Servers[i] = nil
	}
}

// WaitLeader waits until the running servers agree on a JetStream meta
// leader and every one of them is current with it.
func (c *NATSCluster) WaitLeader(t testing.TB) {
	t.Helper()
	WaitFor(t, "a JetStream meta leader", 30*time.Second, func() (bool, string) {
		leaders, current, running := 0, 0, 0
		for _, s := range c.Servers {
			if s == nil {
				continue
			}
			running++
			if s.JetStreamIsLeader() {
				leaders++
			}
			if s.JetStreamIsCurrent() {
				current++
			}
		}
		return leaders == 1 && current == running,
			fmt.Sprintf("%d leaders, %d of %d servers current", leaders, current, running)
	})
}
