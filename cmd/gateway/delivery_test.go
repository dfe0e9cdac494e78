package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/store"
)

// recorder is a downstream that remembers, per event or task, every
// Idempotency-Key it saw and how many 2xx it answered. It fails the first
// attempt of about half the events and tasks, and answers slowly, so kills land mid-retry.
type recorder struct {
	mu    sync.Mutex
	keys  map[string]map[string]bool // id -> keys
	oks   map[string]int             // id -> 2xx answered
	tries map[string]int
}

func newRecorder(t *testing.T) (*recorder, *httptest.Server) {
	rec := &recorder{keys: map[string]map[string]bool{}, oks: map[string]int{}, tries: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		id := r.Header.Get("X-Hookgate-Event-Id")
		rec.mu.Lock()
		if rec.keys[id] == nil {
			rec.keys[id] = map[string]bool{}
		}
		rec.keys[id][r.Header.Get("Idempotency-Key")] = true
		rec.tries[id]++
		fail := rec.tries[id] == 1 && id != "" && id[len(id)-1]%2 == 0
		rec.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
		if fail {
			w.WriteHeader(503)
			return
		}
		rec.mu.Lock()
		rec.oks[id]++
		rec.mu.Unlock()
		w.WriteHeader(200)
	}))
	t.Cleanup(srv.Close)
	return rec, srv
}

func submitTask(client *http.Client, addr, token, key, url string) (int, string, error) {
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/tasks",
		strings.NewReader(fmt.Sprintf(`{"url":%q,"body":{"k":%q}}`, url, key)))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// Killed with SIGKILL while deliveries and tasks are in flight, restarted,
// the gateway delivers every accepted event and task, each (route, event)
// only ever under one Idempotency-Key.
func TestKillDuringDelivery(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	rec, ds := newRecorder(t)
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	const token = "kill-test-token-0123456789"
	cfg := writeConfig(t, dir, fmt.Sprintf(`
listen: %q
data_dir: %q
shutdown_timeout: 2s
api: {tokens: [%q]}
sources: [{name: stripe, verify: stripe, secrets: [%q]}]
routes:
  - {name: billing, sources: [stripe], url: %q, retries: 1, retry_wait_min: 5ms, retry_wait_max: 20ms, schedule: [100ms, 200ms, 400ms, 800ms]}
tasks: {allow: [127.0.0.1], retries: 1, retry_wait_min: 5ms, retry_wait_max: 20ms, schedule: [100ms, 200ms, 400ms, 800ms]}
`, addr, filepath.Join(dir, "data"), token, secret, ds.URL+"/billing"))

	acceptedEvents := map[string]bool{}
	taskIDs := map[string]string{} // Idempotency-Key of the API call -> task id
	client := &http.Client{Timeout: 10 * time.Second}
	n := 0
	for cycle := 0; cycle < 3; cycle++ {
		g := startGateway(t, cfg, addr)
		for i := 0; i < 40; i++ {
			n++
			id := fmt.Sprintf("evt_%d", n)
			if status, what, err := post(client, addr, id); err == nil && status == 200 && what == "accepted" {
				acceptedEvents[id] = true
			}
			if i%4 == 0 {
				key := fmt.Sprintf("task-key-%d", n)
				status, body, err := submitTask(client, addr, token, key, ds.URL+"/task")
				if err == nil && status == 202 {
					taskIDs[key] = between(body, `"id":"`, `"`)
				}
			}
		}
		time.Sleep(time.Duration(rng.IntN(150)) * time.Millisecond) // kill at a random moment of delivery
		g.Kill()
	}
	g := startGateway(t, cfg, addr)
	defer g.Kill()

	// A client retrying its task call after the crashes gets the same task.
	for key, id := range taskIDs {
		status, body, err := submitTask(client, addr, token, key, ds.URL+"/task")
		if err != nil || status != 202 || between(body, `"id":"`, `"`) != id {
			t.Fatalf("task call %s retried: %d %s %v, want task %s again", key, status, body, err, id)
		}
	}

	want := map[string]string{} // id -> the key it must be delivered under
	for id := range acceptedEvents {
		want[id] = outbound.IdempotencyKey("billing", "stripe", id)
	}
	for _, id := range taskIDs {
		want[id] = outbound.IdempotencyKey(outbound.TaskRoute, store.TaskSource, id)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		rec.mu.Lock()
		missing := 0
		for id := range want {
			if rec.oks[id] == 0 {
				missing++
			}
		}
		rec.mu.Unlock()
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d accepted events and tasks never delivered\n%s", missing, len(want), g.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for id, key := range want {
		if len(rec.keys[id]) != 1 || !rec.keys[id][key] {
			t.Errorf("%s delivered under keys %v, want only %s", id, rec.keys[id], key)
		}
	}
	t.Logf("%d events and %d tasks delivered across 3 kills", len(acceptedEvents), len(taskIDs))
}

func between(s, start, end string) string {
	i := strings.Index(s, start)
	if i < 0 {
		return ""
	}
	s = s[i+len(start):]
	if j := strings.Index(s, end); j >= 0 {
		return s[:j]
	}
	return ""
}
