package gatewaytest

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// ForwardProxy is an HTTP forward proxy for plain http:// targets: it
// records each request it forwards.
type ForwardProxy struct {
	*httptest.Server
	mu   sync.Mutex
	seen []ProxiedRequest
}

// ProxiedRequest is a request a ForwardProxy forwarded.
type ProxiedRequest struct {
	URL       string // the absolute URL asked for
	ProxyAuth string // its Proxy-Authorization header
}

// RunForwardProxy starts a ForwardProxy listening on host (an IP; ""
// is 127.0.0.1), closed at the test's end.
func RunForwardProxy(t testing.TB, host string) *ForwardProxy {
	t.Helper()
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	p := &ForwardProxy{}
	p.Server = httptest.NewUnstartedServer(http.HandlerFunc(p.forward))
	p.Listener = ln
	p.Start()
	t.Cleanup(p.Close)
	return p
}

func (p *ForwardProxy) forward(w http.ResponseWriter, r *http.Request) {
	if !r.URL.IsAbs() {
		http.Error(w, "not a proxy request", http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	p.seen = append(p.seen, ProxiedRequest{URL: r.URL.String(), ProxyAuth: r.Header.Get("Proxy-Authorization")})
	p.mu.Unlock()
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Header.Del("Proxy-Authorization")
	resp, err := (&http.Transport{}).RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// Requests returns the requests forwarded so far.
func (p *ForwardProxy) Requests() []ProxiedRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]ProxiedRequest(nil), p.seen...)
}
