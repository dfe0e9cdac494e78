package egress

import (
	"context"
	"net"
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
	srv := nxdomainServer(t)
	var asked atomic.Value
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, address string) (net.Conn, error) {
		asked.Store(address)
		var d net.Dialer
		return d.DialContext(ctx, "udp", srv)
	}}
	p, err := New(nil, WithResolver(r))
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.DialContext(context.Background(), "tcp", "db.internal.test:80")
	if err == nil {
		t.Fatal("dial of a name that does not resolve succeeded")
	}
	server, _ := asked.Load().(string)
	if server == "" {
		t.Fatalf("the resolver asked no server: %v", err)
	}
	if strings.Contains(err.Error(), server) || !strings.Contains(err.Error(), "no such host") {
		t.Errorf("error %q; want \"no such host\" without the DNS server %s", err, server)
	}
}
