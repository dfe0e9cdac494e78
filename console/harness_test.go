package console_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/app"
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/internal/gatewaytest"
)

const (
	opToken   = "op-token-0123456789abcdef"
	taskToken = "task-token-0123456789abcdef"
)

// gateway is a running gateway with two routes: ok (always 200) and broken
// (500 while failing is set, 200 after), whose deliveries die at once.
type gateway struct {
	*app.App
	base    string
	failing atomic.Bool
	mu      sync.Mutex
	got     map[string]int // broken's successful deliveries, by body
	okGot   map[string]int // ok's, by body
}

func startGateway(t *testing.T) *gateway {
	t.Helper()
	return startGatewayWith(t, "")
}

// startGatewayWith starts a gateway with extra config.
func startGatewayWith(t *testing.T, extra string) *gateway {
	t.Helper()
	return startGatewayAPI(t, fmt.Sprintf("api: {tokens: [%q]}", opToken), extra)
}

// startGatewayAPI starts a gateway whose api key is api (none when empty),
// with extra config.
func startGatewayAPI(t *testing.T, api, extra string) *gateway {
	t.Helper()
	g := &gateway{got: map[string]int{}, okGot: map[string]int{}}
	g.failing.Store(true)
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		g.mu.Lock()
		g.okGot[string(body)]++
		g.mu.Unlock()
	}))
	t.Cleanup(ok.Close)
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if g.failing.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, `{"error":"<b>down</b> for maintenance"}`)
			return
		}
		g.mu.Lock()
		g.got[string(body)]++
		g.mu.Unlock()
	}))
	t.Cleanup(broken.Close)
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
listen: "127.0.0.1:0"
data_dir: %q
%s
sources: [{name: shop, verify: none, id_field: id, type_field: type}]
routes:
  - {name: ok, sources: [shop], url: %q}
  - {name: broken, sources: [shop], url: %q, retries: 0, schedule: [10ms], breaker_threshold: 0}
tasks:
  tokens: [%q]
%s
`, t.TempDir(), api, ok.URL, broken.URL, taskToken, extra)), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	g.App = app.New(cfg, log)
	if err := g.Start(context.Background()); err != nil {
		g.Stop(context.Background())
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Stop(context.Background()) })
	g.base = "http://" + g.Addr()
	return g
}

// post sends an event to source shop.
func (g *gateway) post(t *testing.T, body string, hdr ...string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, g.base+"/webhooks/shop", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("post %s: %d %s", body, resp.StatusCode, b)
	}
}

// answer is an HTTP answer, read.
type answer struct {
	StatusCode int
	Header     http.Header
}

// get fetches path with token (none when empty).
func (g *gateway) get(t *testing.T, token, path string) (answer, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, g.base+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header}, string(b)
}

// waitDead waits until route broken has n dead letters.
func (g *gateway) waitDead(t *testing.T, n int) {
	t.Helper()
	gatewaytest.WaitFor(t, fmt.Sprintf("%d dead letters", n), 30*time.Second, func() (bool, string) {
		_, body := g.get(t, opToken, "/v1/deliveries?route=broken&state=dead&limit=500")
		got := strings.Count(body, `"state":"dead"`)
		return got == n, fmt.Sprint(got)
	})
}

// delivered is how many times broken received body successfully.
func (g *gateway) delivered(body string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.got[body]
}

// okDelivered is how many times ok received body.
func (g *gateway) okDelivered(body string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.okGot[body]
}
