package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/store"
)

// One task client's tasks to a host that never answers hold at most
// tasks.token_concurrency workers (a quarter of 4: one): another client's
// task is delivered meanwhile, not after their 60 s timeouts.
func TestTaskClientCannotHoldEveryWorker(t *testing.T) {
	release := make(chan struct{})
	var held atomic.Int32
	tarpit := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		held.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer tarpit.Close()
	defer close(release)
	var delivered atomic.Bool
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		delivered.Store(true)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer good.Close()
	const slow, other = "tok-slow-client-0123456789", "tok-other-client-0123456789"
	a := startApp(t, testConfig(t, fmt.Sprintf("tasks: {tokens: [%q, %q], allow: [127.0.0.1], concurrency: 4, timeout: 60s, retries: 0}\n",
		slow, other)))
	submit := func(token, key, url string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+a.Addr()+"/v1/tasks", bytes.NewReader(fmt.Appendf(nil, `{"url":%q}`, url)))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("task %s: %d %s", key, resp.StatusCode, body)
		}
	}
	for i := range 8 {
		submit(slow, fmt.Sprintf("slow-%d", i), tarpit.URL)
	}
	waitFor(t, "the slow client's task held", func() (bool, string) {
		return held.Load() >= 1, fmt.Sprintf("%d held", held.Load())
	})
	submit(other, "other-1", good.URL)
	waitFor(t, "the other client's task delivered", func() (bool, string) {
		return delivered.Load(), fmt.Sprintf("%d of the slow client's tasks held", held.Load())
	})
	if n := held.Load(); n != 1 {
		t.Errorf("%d of the slow client's tasks held at once, want 1 (tasks.token_concurrency)", n)
	}
}

// A task client's own retries take no more than its tasks' rounds do:
// with tasks.token_concurrency 1, one retry's round runs (held by a host
// that never answers) and a second retry is refused 503 busy.
func TestTaskClientRetriesWithinTokenConcurrency(t *testing.T) {
	release := make(chan struct{})
	var n, held atomic.Int32
	tarpit := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= 2 { // each task's first round fails
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		held.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer tarpit.Close()
	defer close(release)
	const token = "tok-retrying-client-0123456789"
	a := startApp(t, testConfig(t, fmt.Sprintf("tasks: {tokens: [%q], allow: [127.0.0.1], concurrency: 4, token_concurrency: 1, timeout: 60s, retries: 0, schedule: [1h]}\n",
		token)))
	do := func(method, path string, body []byte, key string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+a.Addr()+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, b
	}
	var retry []string
	for i := range 2 {
		code, b := do(http.MethodPost, "/v1/tasks", fmt.Appendf(nil, `{"url":%q}`, tarpit.URL), fmt.Sprintf("k-%d", i))
		if code != http.StatusAccepted {
			t.Fatalf("task %d: %d %s", i, code, b)
		}
		var task struct{ ID string }
		if err := json.Unmarshal(b, &task); err != nil {
			t.Fatal(err)
		}
		retry = append(retry, "/v1/deliveries/"+store.DeliveryUID(outbound.TaskRoute, store.TaskSource, task.ID)+"/retry")
	}
	for i, path := range retry {
		waitFor(t, fmt.Sprintf("task %d's first round recorded", i), func() (bool, string) {
			code, b := do(http.MethodGet, strings.TrimSuffix(path, "/retry"), nil, "")
			return code == http.StatusOK && strings.Contains(string(b), `"state":"retrying"`), fmt.Sprintf("%d %s", code, b)
		})
	}
	if code, b := do(http.MethodPost, retry[0], nil, ""); code != http.StatusAccepted {
		t.Fatalf("first retry: %d %s, want 202", code, b)
	}
	waitFor(t, "the first retry's round held", func() (bool, string) { return held.Load() == 1, fmt.Sprint(held.Load()) })
	if code, b := do(http.MethodPost, retry[1], nil, ""); code != http.StatusServiceUnavailable || !strings.Contains(string(b), `"busy"`) {
		t.Fatalf("second retry while the first runs: %d %s, want 503 busy", code, b)
	}
}
