package outbound

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hookgate/hookgate/jetstream"
)

// An https:// proxy that offers HTTP/2 (as a Go, Envoy or Caddy proxy
// with TLS does) is spoken to in HTTP/1.1, the only protocol net/http
// writes its CONNECT in, while the route's transport attempts HTTP/2.
func TestRouteThroughHTTPSProxyWithH2(t *testing.T) {
	ds := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	defer ds.Close()
	proxy := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
			return
		}
		up, err := net.Dial("tcp", r.Host)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer up.Close()
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		c, brw, err := rc.Hijack()
		if err != nil { // HTTP/2: stream the tunnel through the request
			go func() { _, _ = io.Copy(up, r.Body) }()
			_, _ = io.Copy(flushWriter{w, rc}, up)
			return
		}
		defer c.Close()
		go func() { _, _ = io.Copy(up, brw) }()
		_, _ = io.Copy(c, up)
	}))
	proxy.EnableHTTP2 = true
	proxy.StartTLS()
	defer proxy.Close()

	roots := x509.NewCertPool()
	roots.AddCert(ds.Certificate()) // httptest's one certificate, the proxy's too
	tr := defaultTransport()
	tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	r, err := newRoute(Route{Name: "r", Sources: []string{"s"}, URL: ds.URL, Proxy: proxy.URL}, jetstream.DefaultStream, tr)
	if err != nil {
		t.Fatal(err)
	}
	defer r.client.CloseIdleConnections()
	resp, err := r.client.Get(ds.URL)
	if err != nil {
		t.Fatalf("a request through an https:// proxy that speaks HTTP/2: %s", transportError(err))
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

type flushWriter struct {
	w  io.Writer
	rc *http.ResponseController
}

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	_ = f.rc.Flush()
	return n, err
}
