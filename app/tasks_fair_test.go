package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/store"
)

// One task client's tasks to a host that never answers hold at most
// tasks.token_concurrency workers (a quarter of 4: one): another client's
// task is delivered meanwhile, not after their 60 s timeouts.
func TestTaskClientCannotHoldEveryWorker(t *testing.T) {
	tarpit, held, release := newTarpit(t, 0)
	defer release() // before the gateway stops: it waits for the rounds held
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
		if code, b := asClient(t, a, token)(http.MethodPost, "/v1/tasks", fmt.Appendf(nil, `{"url":%q}`, url), key); code != http.StatusAccepted {
			t.Fatalf("task %s: %d %s", key, code, b)
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
	tarpit, held, release := newTarpit(t, 2) // each task's first round fails
	defer release()
	const token = "tok-retrying-client-0123456789"
	a := startApp(t, testConfig(t, fmt.Sprintf("tasks: {tokens: [%q], allow: [127.0.0.1], concurrency: 4, token_concurrency: 1, timeout: 60s, retries: 0, schedule: [1h]}\n",
		token)))
	do := asClient(t, a, token)
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

// asClient sends requests to a's API with token (and key as the
// Idempotency-Key unless empty), and returns the answer's status and body.
func asClient(t *testing.T, a *App, token string) func(method, path string, body []byte, key string) (int, []byte) {
	return func(method, path string, body []byte, key string) (int, []byte) {
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
}

// newTarpit is a downstream that answers its first fail requests 500 and
// holds every other one until release, counting those it holds.
func newTarpit(t *testing.T, fail int32) (srv *httptest.Server, held *atomic.Int32, release func()) {
	done := make(chan struct{})
	var n atomic.Int32
	held = new(atomic.Int32)
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= fail {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		held.Add(1)
		select {
		case <-done:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	var once sync.Once
	return srv, held, func() { once.Do(func() { close(done) }) }
}
