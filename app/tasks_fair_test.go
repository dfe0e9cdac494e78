package app

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
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
