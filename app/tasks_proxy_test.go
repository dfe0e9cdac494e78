package app

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// Tasks go through tasks.proxy. The proxy is dialed as it is: its
// address (127.0.0.2, not in tasks.allow) is the operator's choice, while
// the task URL is still checked at submission.
func TestTaskThroughProxy(t *testing.T) {
	var got atomic.Int32
	ds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer ds.Close()
	proxy := gatewaytest.RunForwardProxy(t, "127.0.0.2")
	const token = "tok-proxied-client-0123456789"
	a := startApp(t, testConfig(t, fmt.Sprintf("tasks: {tokens: [%q], allow: [127.0.0.1], proxy: %q}\n", token, proxy.URL)))
	do := asClient(t, a, token)
	if code, b := do(http.MethodPost, "/v1/tasks", fmt.Appendf(nil, `{"url":%q}`, ds.URL+"/job"), "k-1"); code != http.StatusAccepted {
		t.Fatalf("task: %d %s", code, b)
	}
	waitFor(t, "the task delivered", func() (bool, string) { return got.Load() == 1, fmt.Sprint(got.Load()) })
	if r := proxy.Requests(); len(r) != 1 || r[0].URL != ds.URL+"/job" {
		t.Errorf("the proxy forwarded %+v, want the task's request", r)
	}
	// The submission check still applies: 127.0.0.2 is not allowed.
	if code, b := do(http.MethodPost, "/v1/tasks", fmt.Appendf(nil, `{"url":%q}`, strings.Replace(ds.URL, "127.0.0.1", "127.0.0.2", 1)), "k-2"); code != http.StatusBadRequest && code != http.StatusUnprocessableEntity {
		t.Errorf("a task to a refused address through the proxy: %d %s, want refused", code, b)
	}
}
