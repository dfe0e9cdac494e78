package admin_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/app"
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/outbound"
)

// A downstream per route that answers 410 Gone (dead at once) until told
// to answer 200, and counts the requests of each event.
type bulkDownstream struct {
	ok      atomic.Bool
	mu      sync.Mutex
	hits    map[string]int // route/event -> requests
	running int
	peak    int // the most requests at once once ok
}

func (d *bulkDownstream) count(route string) (n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, v := range d.hits {
		if strings.HasPrefix(k, route+"/") {
			n += v
		}
	}
	return n
}

func startBulkGateway(t *testing.T) (client, *bulkDownstream) {
	t.Helper()
	d := &bulkDownstream{hits: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		d.mu.Lock()
		d.hits[strings.TrimPrefix(r.URL.Path, "/")+"/"+r.Header.Get("X-Hookgate-Event-Id")]++
		d.mu.Unlock()
		if !d.ok.Load() {
			w.WriteHeader(http.StatusGone)
			return
		}
		d.mu.Lock()
		d.running++
		d.peak = max(d.peak, d.running)
		d.mu.Unlock()
		time.Sleep(5 * time.Millisecond) // rounds overlap
		d.mu.Lock()
		d.running--
		d.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
listen: "127.0.0.1:0"
data_dir: %q
api: {tokens: [%q]}
sources: [{name: s, verify: none, id_field: id}, {name: t, verify: none, id_field: id}]
routes:
  - {name: a, sources: [s], url: %q, retries: 0}
  - {name: b, sources: [s, t], url: %q, retries: 0}
tasks: {tokens: [%q], allow: [127.0.0.1]}
`, t.TempDir(), opToken, srv.URL+"/a", srv.URL+"/b", aToken)), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	gw := app.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := gw.Start(context.Background()); err != nil {
		gw.Stop(context.Background())
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Stop(context.Background()) })
	return client{base: "http://" + gw.Addr()}, d
}

// Many dead letters on two routes: a bulk retry filtered by route sends
// exactly that route's again (downstream counts), a repeat adds nothing,
// and a bad filter is 400.
func TestBulkRetry(t *testing.T) {
	c, d := startBulkGateway(t)
	const n = 230 // more than two batches
	for i := range n {
		if a := c.do(t, "", http.MethodPost, "/webhooks/s", "", fmt.Sprintf(`{"id":"e%d"}`, i)); a.status != 200 {
			t.Fatalf("event: %d %s", a.status, a.raw)
		}
	}
	if a := c.do(t, "", http.MethodPost, "/webhooks/t", "", `{"id":"t1"}`); a.status != 200 {
		t.Fatalf("event: %d %s", a.status, a.raw)
	}
	dead := func(route string) int {
		a := c.do(t, bearer(opToken), http.MethodGet, "/v1/deliveries?state=dead&limit=500&route="+route, "", "")
		data, _ := a.body["data"].([]any)
		return len(data)
	}
	gatewaytest.WaitFor(t, "every delivery dead", 60*time.Second, func() (bool, string) {
		da, db := dead("a"), dead("b")
		return da == n && db == n+1, fmt.Sprintf("a %d, b %d dead", da, db)
	})
	if ca, cb := d.count("a"), d.count("b"); ca != n || cb != n+1 {
		t.Fatalf("before the bulk retry: a %d, b %d requests", ca, cb)
	}

	bad := []string{
		``, `[]`, `{"route":"a"} {}`, `{"route":"a","bogus":1}`, `{}`, `{"state":"dead"}`,
		`{"route":"a","state":"succeeded"}`, `{"route":"a","state":"pending"}`,
		`{"since":"yesterday"}`, `{"route":"a","until":"2024-13-01T00:00:00Z"}`,
		`{"since":"2024-05-02T00:00:00Z","until":"2024-05-01T00:00:00Z"}`,
		`{"route":"` + strings.Repeat("x", 300) + `"}`, `{"route":"a\u0000"}`,
		`{"route":"a","all":"yes"}`,
		// The zero time would read as no bound: "retry everything".
		`{"route":"a","until":"0001-01-01T00:00:00Z"}`, `{"route":"a","since":"1969-12-31T23:59:59Z"}`,
	}
	for _, body := range bad {
		if a := c.do(t, bearer(opToken), http.MethodPost, "/v1/deliveries/retry", "", body); a.status != 400 {
			t.Errorf("filter %q: %d %s, want 400", body, a.status, a.raw)
		}
	}
	if a := c.do(t, bearer(aToken), http.MethodPost, "/v1/deliveries/retry", "", `{"route":"a"}`); a.status != 403 {
		t.Errorf("a task client's bulk retry: %d %s, want 403", a.status, a.raw)
	}
	if a := c.do(t, "", http.MethodPost, "/v1/deliveries/retry", "", `{"route":"a"}`); a.status != 401 {
		t.Errorf("no token: %d %s, want 401", a.status, a.raw)
	}
	if a := c.do(t, bearer(opToken), http.MethodPost, "/v1/deliveries/retry", "", `{"route":"a","until":"2000-01-01T00:00:00Z"}`); a.status != 202 || a.raw != `{"count":0}` {
		t.Errorf("nothing matched: %d %s, want 202 count 0", a.status, a.raw)
	}

	d.ok.Store(true)
	a := c.do(t, bearer(opToken), http.MethodPost, "/v1/deliveries/retry", "", `{"route":"a","state":"dead"}`)
	if a.status != 202 || a.body["count"] != float64(n) {
		t.Fatalf("bulk retry of route a: %d %s, want 202 count %d", a.status, a.raw, n)
	}
	gatewaytest.WaitFor(t, "route a's dead letters delivered", 60*time.Second, func() (bool, string) {
		return dead("a") == 0 && d.count("a") == 2*n, fmt.Sprintf("a: %d dead, %d requests", dead("a"), d.count("a"))
	})
	if cb := d.count("b"); cb != n+1 || dead("b") != n+1 {
		t.Fatalf("route b after route a's bulk retry: %d requests, %d dead; want %d and %d untouched", cb, dead("b"), n+1, n+1)
	}
	// A repeat matches nothing and sends nothing.
	a = c.do(t, bearer(opToken), http.MethodPost, "/v1/deliveries/retry", "", `{"route":"a"}`)
	if a.status != 202 || a.body["count"] != float64(0) {
		t.Fatalf("repeat: %d %s, want 202 count 0", a.status, a.raw)
	}
	// Route b by source t: its one delivery of source t only.
	a = c.do(t, bearer(opToken), http.MethodPost, "/v1/deliveries/retry", "", `{"source":"t"}`)
	if a.status != 202 || a.body["count"] != float64(1) {
		t.Fatalf("by source: %d %s, want 202 count 1", a.status, a.raw)
	}
	gatewaytest.WaitFor(t, "source t's dead letter delivered", 60*time.Second, func() (bool, string) {
		return dead("b") == n, fmt.Sprintf("b: %d dead", dead("b"))
	})
	// Everything else of b, twice at once: each delivered once more.
	for range 2 {
		if a := c.do(t, bearer(opToken), http.MethodPost, "/v1/deliveries/retry", "", `{"all":true}`); a.status != 202 {
			t.Fatalf("all: %d %s", a.status, a.raw)
		}
	}
	gatewaytest.WaitFor(t, "route b's dead letters delivered", 60*time.Second, func() (bool, string) {
		return dead("b") == 0 && d.count("b") == 2*(n+1), fmt.Sprintf("b: %d dead, %d requests", dead("b"), d.count("b"))
	})
	if a := c.do(t, bearer(opToken), http.MethodPost, "/v1/deliveries/retry", "", `{"all":true}`); a.status != 202 || a.raw != `{"count":0}` {
		t.Fatalf("all, once everything succeeded: %d %s, want count 0", a.status, a.raw)
	}
	if ca, cb := d.count("a"), d.count("b"); ca != 2*n || cb != 2*(n+1) {
		t.Fatalf("after everything: a %d, b %d requests, want %d and %d", ca, cb, 2*n, 2*(n+1))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.peak > outbound.BulkRounds {
		t.Fatalf("%d requests at once, want at most %d", d.peak, outbound.BulkRounds)
	}
}
