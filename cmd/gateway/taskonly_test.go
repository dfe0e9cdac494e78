package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// A gateway with no sources that serves tasks starts, takes POST /v1/tasks
// and delivers the task.
func TestTaskOnlyGateway(t *testing.T) {
	var mu sync.Mutex
	got := map[string]string{} // task id -> body
	ds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got[r.Header.Get("X-Hookgate-Event-Id")] = string(b)
		mu.Unlock()
	}))
	defer ds.Close()
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	const token = "task-only-token-0123456789"
	cfg := writeConfig(t, dir, fmt.Sprintf(`
listen: %q
data_dir: %q
tasks: {tokens: [%q], allow: [127.0.0.1]}
`, addr, filepath.Join(dir, "data"), token))
	g := startGateway(t, cfg, addr)
	defer g.Kill()

	client := &http.Client{Timeout: 10 * time.Second}
	status, body, err := submitTask(client, addr, token, "only-tasks-1", ds.URL+"/task")
	if err != nil || status != http.StatusAccepted {
		t.Fatalf("POST /v1/tasks: %d %s %v\n%s", status, body, err, g.Log())
	}
	id := between(body, `"id":"`, `"`)
	gatewaytest.WaitFor(t, "the task delivered", 30*time.Second, func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return got[id] == `{"k":"only-tasks-1"}`, fmt.Sprint(got)
	})
	resp, err := client.Post("http://"+addr+"/webhooks/stripe", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("POST /webhooks/stripe on a task-only gateway: %d, want 404", resp.StatusCode)
	}
}
