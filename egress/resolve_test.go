package egress

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// nxdomainServer answers every DNS query on a UDP socket with NXDOMAIN.
func nxdomainServer(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			q := buf[:n]
			end := 12 // the question: a name's labels, then type and class
			for end < n && q[end] != 0 {
				end += int(q[end]) + 1
			}
			end += 5
			if n < 12 || end > n {
				continue
			}
			resp := append([]byte{q[0], q[1], 0x81, 0x83, 0, 1, 0, 0, 0, 0, 0, 0}, q[12:end]...)
			_, _ = pc.WriteTo(resp, from)
		}
	}()
	return pc.LocalAddr().String()
}

// A name that does not resolve is answered without the address of the
// DNS server that said so: the text reaches the task client (an
// attempt's error), who must not learn the gateway's internal addresses.
func TestResolveErrorHidesServer(t *testing.T) {
	p, asked := nxdomainPolicy(t)
	_, err := p.DialContext(context.Background(), "tcp", "db.internal.test:80")
	if err == nil {
		t.Fatal("dial of a name that does not resolve succeeded")
	}
	checkHidesServer(t, err, asked)
}

// Likewise a tasks.proxy whose name does not resolve: the dial error
// reaches the task client through the request's.
func TestProxyResolveErrorHidesServer(t *testing.T) {
	p, asked := nxdomainPolicy(t)
	u, err := ParseProxy("http://proxy.internal.test:3128")
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: p.ProxyTransport(u)}
	resp, err := c.Get("http://93.184.215.14/") // public: checked without a lookup
	if err == nil {
		resp.Body.Close()
		t.Fatal("request through a proxy whose name does not resolve succeeded")
	}
	checkHidesServer(t, err, asked)
}

// nxdomainPolicy is a policy whose resolver asks nxdomainServer; asked
// holds the address the resolver asked.
func nxdomainPolicy(t *testing.T) (*Policy, *atomic.Value) {
	t.Helper()
	srv := nxdomainServer(t)
	asked := &atomic.Value{}
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, address string) (net.Conn, error) {
		asked.Store(address)
		var d net.Dialer
		return d.DialContext(ctx, "udp", srv)
	}}
	p, err := New(nil, WithResolver(r))
	if err != nil {
		t.Fatal(err)
	}
	return p, asked
}

// checkHidesServer fails unless err says "no such host" without the DNS
// server the resolver asked.
func checkHidesServer(t *testing.T, err error, asked *atomic.Value) {
	t.Helper()
	server, _ := asked.Load().(string)
	if server == "" {
		t.Fatalf("the resolver asked no server: %v", err)
	}
	if strings.Contains(err.Error(), server) || !strings.Contains(err.Error(), "no such host") {
		t.Errorf("error %q; want \"no such host\" without the DNS server %s", err, server)
	}
}
