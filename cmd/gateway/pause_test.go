package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// A route paused by an operator stays paused across a restart of the
// binary (nothing is delivered to it), until it is resumed.
func TestPauseSurvivesRestart(t *testing.T) {
	var got atomic.Int64
	ds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		got.Add(1)
	}))
	defer ds.Close()
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	const token = "pause-test-token-0123456789"
	cfg := writeConfig(t, dir, fmt.Sprintf(`
listen: %q
data_dir: %q
shutdown_timeout: 10s
api: {tokens: [%q]}
sources: [{name: stripe, verify: stripe, secrets: [%q]}]
routes: [{name: crm, url: %q, sources: [stripe]}]
`, addr, filepath.Join(dir, "data"), token, secret, ds.URL))
	client := &http.Client{Timeout: 10 * time.Second}
	call := func(method, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+addr+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	g := startGateway(t, cfg, addr)
	if code, body := call(http.MethodPost, "/v1/routes/crm/pause"); code != 200 || !strings.Contains(body, `"state":"paused"`) {
		t.Fatalf("pause: %d %s", code, body)
	}
	terminate(t, g, 30*time.Second)

	g = startGateway(t, cfg, addr)
	defer g.Kill()
	if code, body := call(http.MethodGet, "/v1/routes"); code != 200 || !strings.Contains(body, `"state":"paused"`) {
		t.Fatalf("after a restart: %d %s, want crm paused\n%s", code, body, g.Log())
	}
	if code, _, err := post(client, addr, "evt_paused_1"); err != nil || code != 200 {
		t.Fatalf("post: %d %v", code, err)
	}
	// The event is in the route's backlog, not delivered.
	gatewaytest.WaitFor(t, "the event in crm's backlog", 30*time.Second, func() (bool, string) {
		_, body := call(http.MethodGet, "/v1/routes")
		return strings.Contains(body, `"backlog":1`), body
	})
	if n := got.Load(); n != 0 {
		t.Fatalf("%d deliveries to a paused route", n)
	}
	if code, body := call(http.MethodPost, "/v1/routes/crm/resume"); code != 200 || !strings.Contains(body, `"state":"active"`) {
		t.Fatalf("resume: %d %s", code, body)
	}
	gatewaytest.WaitFor(t, "the event delivered once resumed", 30*time.Second, func() (bool, string) {
		return got.Load() == 1, fmt.Sprint(got.Load())
	})
	terminate(t, g, 30*time.Second)

	g = startGateway(t, cfg, addr)
	defer g.Kill()
	if code, body := call(http.MethodGet, "/v1/routes"); code != 200 || !strings.Contains(body, `"state":"active"`) {
		t.Fatalf("after resume and a restart: %d %s, want crm active", code, body)
	}
}
