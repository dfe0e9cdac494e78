package egress

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// client returns an HTTP client using p.Transport that follows no redirects.
func client(t *testing.T, p *Policy) *http.Client {
	t.Helper()
	tr := p.Transport()
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{
		Transport:     tr,
		Timeout:       10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// noConnection fails the test if ln has a pending connection.
func noConnection(t *testing.T, ln *net.TCPListener) {
	t.Helper()
	if err := ln.SetDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	c, err := ln.Accept()
	if err == nil {
		c.Close()
		t.Fatalf("a connection reached the listener from %s", c.RemoteAddr())
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Accept: %v", err)
	}
}

// TestDNSRebinding: a name answers a public address when the task is
// submitted and 127.0.0.1 when it is delivered. CheckURL passes, the
// dial is refused, and nothing connects to the local listener.
func TestDNSRebinding(t *testing.T) {
	t.Parallel()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	hostport := net.JoinHostPort("rebind.test", strconv.Itoa(port))

	r := newFakeResolver(t, map[string][][]string{
		"rebind.test": {{"93.184.216.34"}, {"127.0.0.1"}},
	})
	p, err := New(nil, WithResolver(r))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	if err := p.CheckURL(ctx, "http://"+hostport+"/task"); err != nil {
		t.Fatalf("CheckURL at submit time: %v", err)
	}

	c, err := p.DialContext(ctx, "tcp", hostport)
	if c != nil {
		c.Close()
	}
	if !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("DialContext = %v; want ErrNotAllowed", err)
	}
	if got, want := err.Error(), "destination not allowed: rebind.test resolves to an address that is loopback"; got != want {
		t.Errorf("DialContext error %q; want %q", got, want)
	}

	// Through the transport as well.
	resp, err := client(t, p).Get("http://" + hostport + "/task")
	if err == nil {
		resp.Body.Close()
		t.Fatalf("GET through Transport succeeded; want ErrNotAllowed")
	}
	if !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("GET through Transport: %v; want ErrNotAllowed", err)
	}

	if n := r.lookups("rebind.test"); n != 3 {
		t.Errorf("resolver asked %d times; want 3 (submit, dial, transport dial)", n)
	}
	noConnection(t, ln)
}

func TestDialAllowed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok "+r.Host)
	}))
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	port := u.Port()
	// Environment proxies are never used: this one does not exist.
	t.Setenv("HTTP_PROXY", "http://proxy.invalid:3128")
	t.Setenv("http_proxy", "http://proxy.invalid:3128")
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")

	r := newFakeResolver(t, map[string][][]string{
		"svc.internal.test":   {{"127.0.0.1"}},
		"a.wild.test":         {{"127.0.0.1"}},
		"other.internal.test": {{"127.0.0.1"}},
	})
	tests := []struct {
		name  string
		allow []string
		url   string
		ok    bool
	}{
		{"by IP", []string{"127.0.0.1"}, srv.URL, true},
		{"by CIDR", []string{"127.0.0.0/8"}, srv.URL, true},
		{"by IPv4-mapped IP", []string{"::ffff:127.0.0.1"}, srv.URL, true},
		{"by host name", []string{"svc.internal.test"}, "http://svc.internal.test:" + port + "/", true},
		{"by wildcard", []string{"*.wild.test"}, "http://a.wild.test:" + port + "/", true},
		{"not allowed", nil, srv.URL, false},
		{"other host name", []string{"svc.internal.test"}, "http://other.internal.test:" + port + "/", false},
		{"wildcard is not the name", []string{"*.svc.internal.test"}, "http://svc.internal.test:" + port + "/", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.allow, WithResolver(r))
			if err != nil {
				t.Fatal(err)
			}
			if err := p.CheckURL(context.Background(), tc.url); (err == nil) != tc.ok {
				t.Errorf("CheckURL(%q) = %v; want ok %v", tc.url, err, tc.ok)
			}
			resp, err := client(t, p).Get(tc.url)
			if !tc.ok {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("GET %s succeeded; want ErrNotAllowed", tc.url)
				}
				if !errors.Is(err, ErrNotAllowed) {
					t.Fatalf("GET %s: %v; want ErrNotAllowed", tc.url, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("GET %s: %v", tc.url, err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			u, _ := url.Parse(tc.url)
			if got, want := string(body), "ok "+u.Host; resp.StatusCode != http.StatusOK || got != want {
				t.Errorf("GET %s = %d %q; want 200 %q", tc.url, resp.StatusCode, got, want)
			}
		})
	}
}

// TestDialFallback: the first address refuses the connection, the next one
// is tried.
func TestDialFallback(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("needs 127.0.0.2 on the loopback interface")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	r := newFakeResolver(t, map[string][][]string{"multi.test": {{"127.0.0.2", "127.0.0.1"}}})
	p, err := New([]string{"127.0.0.0/8"}, WithResolver(r))
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.DialContext(context.Background(), "tcp", net.JoinHostPort("multi.test", u.Port()))
	if err != nil {
		t.Fatalf("DialContext: %v", err)
	}
	defer c.Close()
	if got := c.RemoteAddr().String(); got != u.Host {
		t.Errorf("connected to %s; want %s", got, u.Host)
	}
}

func TestDialContextErrors(t *testing.T) {
	t.Parallel()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)

	r := newFakeResolver(t, map[string][][]string{
		"private.test": {{"10.1.2.3"}},
		"mixed.test":   {{"127.0.0.1", "93.184.216.34"}},
		"mapped.test":  {{"::ffff:127.0.0.1"}},
		"localhost":    {{"127.0.0.1"}},
	})
	p, err := New(nil, WithResolver(r))
	if err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		network, addr string
		ctx           context.Context
		want          string // outcome
	}{
		{"tcp", "127.0.0.1:" + port, nil, denied},
		{"tcp4", "127.0.0.1:" + port, nil, denied},
		{"tcp", "[::ffff:127.0.0.1]:" + port, nil, denied},
		{"tcp", "[::1]:" + port, nil, denied},
		{"tcp", "[fe80::1%lo]:" + port, nil, denied},
		{"tcp", "localhost:" + port, nil, denied},
		{"tcp", "2130706433:" + port, nil, denied},
		{"tcp", "mixed.test:" + port, nil, denied},
		{"tcp", "mapped.test:" + port, nil, denied},
		{"tcp", "private.test:" + port, nil, denied},
		{"tcp", "127.0.0.1", nil, bad},
		{"tcp", "127.0.0.1:0", nil, bad},
		{"tcp", "127.0.0.1:http", nil, bad},
		{"tcp", ":" + port, nil, bad},
		{"udp", "127.0.0.1:53", nil, other},
		{"unix", "/tmp/sock", nil, other},
		{"tcp", "nxdomain.test:80", nil, other},
		{"tcp", "private.test:80", canceled, other},
	}
	for _, tc := range tests {
		t.Run(tc.network+" "+tc.addr, func(t *testing.T) {
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			c, err := p.DialContext(ctx, tc.network, tc.addr)
			if c != nil {
				c.Close()
			}
			if got := outcome(err); got != tc.want {
				t.Errorf("DialContext(%s, %s) = %v (%s); want %s", tc.network, tc.addr, err, got, tc.want)
			}
		})
	}
	if n := r.lookups("localhost"); n != 0 {
		t.Errorf("resolver asked %d times about localhost", n)
	}
	noConnection(t, ln)
}

func TestTransport(t *testing.T) {
	t.Parallel()
	var p Policy
	tr := p.Transport()
	if tr.Proxy != nil {
		t.Error("Proxy is set; environment proxies must not be used")
	}
	if tr.DialContext == nil || tr.DialTLSContext != nil {
		t.Error("Transport must dial through DialContext only")
	}
	if !tr.ForceAttemptHTTP2 {
		t.Error("ForceAttemptHTTP2 not set")
	}
	if tr.TLSHandshakeTimeout <= 0 || tr.IdleConnTimeout <= 0 {
		t.Errorf("timeouts not set: TLS handshake %v, idle %v", tr.TLSHandshakeTimeout, tr.IdleConnTimeout)
	}
	// Two transports do not share state.
	if p.Transport() == tr {
		t.Error("Transport returned the same *http.Transport twice")
	}
}
