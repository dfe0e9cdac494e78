package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// A task whose name does not resolve at submission is queued; with
// tasks.proxy the gateway dials only the proxy, so the name is resolved
// and checked before each request instead. A name only the proxy's
// resolver knows (split-horizon DNS: an internal service) is not sent,
// though the proxy would reach 127.0.0.2, outside tasks.allow.
func TestTaskProxyChecksUnresolvedName(t *testing.T) {
	var hits atomic.Int32
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	internal := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	internal.Listener = ln
	internal.Start()
	defer internal.Close()
	// The proxy resolves billing.invalid to the internal service, as a
	// proxy inside the private network would.
	fwd := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if strings.HasPrefix(addr, "billing.invalid:") {
			addr = internal.Listener.Addr().String()
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out := r.Clone(r.Context())
		out.RequestURI = ""
		resp, err := fwd.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	defer proxy.Close()
	defer fwd.CloseIdleConnections()

	const token = "tok-proxied-client-0123456789"
	a := startApp(t, testConfig(t, fmt.Sprintf("tasks: {tokens: [%q], proxy: %q, retries: 0, schedule: [1h]}\n", token, proxy.URL)))
	do := asClient(t, a, token)
	code, b := do(http.MethodPost, "/v1/tasks", []byte(`{"url":"http://billing.invalid/admin"}`), "k-1")
	if code != http.StatusAccepted {
		t.Fatalf("task: %d %s", code, b) // refused at submission would be fine too
	}
	var task struct {
		ID       string `json:"id"`
		State    string `json:"state"`
		Attempts int    `json:"attempts"`
	}
	if err := json.Unmarshal(b, &task); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the task's first attempt", func() (bool, string) {
		_, b := do(http.MethodGet, "/v1/tasks/"+task.ID, nil, "")
		_ = json.Unmarshal(b, &task)
		return task.Attempts >= 1, string(b)
	})
	if n := hits.Load(); n != 0 || task.State == "succeeded" {
		t.Errorf("a task to a name the gateway could not check reached a loopback address through the proxy: %d requests, task %s", n, task.State)
	}
}
