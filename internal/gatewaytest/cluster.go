package gatewaytest

import (
	"fmt"
	"net/url"
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
func RunNATSCluster(t testing.TB, n int) *NATSCluster {
	t.Helper()
	client, cluster := make([]int, n), make([]int, n)
	var routes, urls []string
	for i := range n {
		client[i], cluster[i] = FreePort(t), FreePort(t)
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", cluster[i]))
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", client[i]))
	}
	c := &NATSCluster{URL: strings.Join(urls, ","), Servers: make([]*server.Server, n)}
	for i := range n {
		var rs []*url.URL
		for j, r := range routes {
			if j != i {
				u, err := url.Parse(r)
				if err != nil {
					t.Fatal(err)
				}
				rs = append(rs, u)
			}
		}
		c.opts = append(c.opts, &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1", Port: client[i],
			Cluster:   server.ClusterOpts{Name: "hookgate-test", Host: "127.0.0.1", Port: cluster[i]},
			Routes:    rs,
			JetStream: true, StoreDir: t.TempDir(),
			NoSigs: true, NoLog: true,
		})
	}
	t.Cleanup(func() {
		for i := range c.Servers {
			c.Stop(i)
		}
	})
	for i := range n {
		c.Start(t, i)
	}
	c.WaitLeader(t)
	return c
}

// Start starts server i (again), on its ports and store, and waits until
// it takes connections.
func (c *NATSCluster) Start(t testing.TB, i int) {
	t.Helper()
	o := *c.opts[i]
	srv, err := server.NewServer(&o)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatalf("nats-server %s not ready", o.ServerName)
	}
	c.Servers[i] = srv
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
