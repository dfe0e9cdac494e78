package app

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// A handler that panics is answered 500 internal and logged with its
// stack, never the request's token; the server goes on serving.
func TestPanicAnswered500(t *testing.T) {
	var mu sync.Mutex
	var logged bytes.Buffer
	log := slog.New(slog.NewJSONHandler(lockedWriter{&mu, &logged}, nil))
	panics := prometheus.NewCounter(prometheus.CounterOpts{Name: "panics"})
	h := recoverPanics(func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/boom" {
			var s []int
			_ = s[len(ctx.Path())] // out of range: panics
		}
		ctx.SetStatusCode(200)
	}, log, panics)
	ln := fasthttputil.NewInmemoryListener()
	srv := &fasthttp.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	c := &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }}
	do := func(path string) (int, string) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("http://gw" + path)
		req.Header.Set("Authorization", "Bearer s3cret-token")
		if err := c.Do(req, resp); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return resp.StatusCode(), string(resp.Body())
	}
	if status, body := do("/boom"); status != 500 || !strings.Contains(body, `"code":"internal"`) {
		t.Errorf("/boom: %d %s; want 500 internal", status, body)
	}
	if status, _ := do("/ok"); status != 200 {
		t.Errorf("/ok after the panic: %d, want 200", status)
	}
	if got := testutil.ToFloat64(panics); got != 1 {
		t.Errorf("panics counted %v, want 1", got)
	}
	mu.Lock()
	defer mu.Unlock()
	out := logged.String()
	if !strings.Contains(out, "request handler panicked") || !strings.Contains(out, "index out of range") ||
		!strings.Contains(out, "recover_test.go") {
		t.Errorf("log lacks the panic or its stack: %s", out)
	}
	if strings.Contains(out, "s3cret") {
		t.Errorf("log holds the request's token: %s", out)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
