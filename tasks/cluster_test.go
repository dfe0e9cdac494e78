package tasks_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// Two gateways in cluster mode on a 3-node NATS cluster: a task POSTed
// with one Idempotency-Key to both is one task (both answers name it, the
// second a replay) delivered once; another request under a key another
// gateway took is 422. A task's own idempotency_key is sent by the one
// gateway that delivers it.
func TestTaskKeyAcrossGateways(t *testing.T) {
	nc := gatewaytest.RunNATSCluster(t, 3)
	var mu sync.Mutex
	got := map[string]int{}       // requests by path
	keys := map[string][]string{} // Idempotency-Keys by path
	downstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.URL.Path]++
		keys[r.URL.Path] = append(keys[r.URL.Path], r.Header.Get("Idempotency-Key"))
		mu.Unlock()
	}))
	t.Cleanup(downstream.Close)
	extra := fmt.Sprintf(`nats: {url: %q, replicas: 3, duplicate_window: 1s, connect_timeout: 5s}
cluster: {enabled: true, claim_timeout: 10s}
`, nc.URL)
	gws := []*harness{start(t, extra), start(t, extra)}

	body := fmt.Sprintf(`{"url":"%s/once","body":{"a":1}}`, downstream.URL)
	first := gws[0].submit(t, "key-1", body)
	second := gws[1].submit(t, "key-1", body)
	if first.status != 202 || second.status != 202 {
		t.Fatalf("the same key and request at two gateways: %d %s, %d %s; want 202 twice", first.status, first.raw, second.status, second.raw)
	}
	if first.body["id"] != second.body["id"] {
		t.Errorf("task IDs %v and %v; want one task", first.body["id"], second.body["id"])
	}
	if !second.replayed {
		t.Errorf("second answer not marked Idempotent-Replayed")
	}

	// Another request under a key the other gateway took.
	gws[0].submit(t, "key-2", fmt.Sprintf(`{"url":"%s/two","body":{"a":1}}`, downstream.URL))
	if a := gws[1].submit(t, "key-2", fmt.Sprintf(`{"url":"%s/two","body":{"a":2}}`, downstream.URL)); a.status != 422 || a.code() != "idempotency_key_mismatch" {
		t.Errorf("another request under key-2 at the other gateway: %d %s; want 422 idempotency_key_mismatch", a.status, a.raw)
	}

	// A task with its own idempotency_key, at both gateways.
	own := fmt.Sprintf(`{"url":"%s/own","idempotency_key":"charge-77"}`, downstream.URL)
	if a, b := gws[0].submit(t, "key-3", own), gws[1].submit(t, "key-3", own); a.status != 202 || b.status != 202 ||
		a.body["id"] != b.body["id"] || a.body["idempotency_key"] != "charge-77" || b.body["idempotency_key"] != "charge-77" {
		t.Errorf("a task with its own key at two gateways: %d %s, %d %s; want one task showing charge-77", a.status, a.raw, b.status, b.raw)
	}

	waitFor(t, "the tasks delivered, outboxes and stream drained", func() (bool, string) {
		mu.Lock()
		once, two, own := got["/once"], got["/two"], got["/own"]
		mu.Unlock()
		if once == 0 || two == 0 || own == 0 {
			return false, fmt.Sprintf("/once %d, /two %d, /own %d", once, two, own)
		}
		for i, g := range gws {
			if _, ok, err := g.Store().OutboxOldest(context.Background()); ok || err != nil {
				return false, fmt.Sprintf("gateway %d: outbox not empty (%v)", i, err)
			}
		}
		s, err := gws[0].Broker().JetStream().Stream(context.Background(), gws[0].Broker().Stream())
		if err != nil {
			return false, err.Error()
		}
		info, err := s.Info(context.Background())
		if err != nil || info.State.Msgs != 0 {
			return false, fmt.Sprintf("stream: %v messages (%v)", info, err)
		}
		return true, ""
	})
	mu.Lock()
	defer mu.Unlock()
	if got["/once"] != 1 || got["/two"] != 1 || got["/own"] != 1 {
		t.Fatalf("deliveries: /once %d, /two %d, /own %d; want 1 each", got["/once"], got["/two"], got["/own"])
	}
	if k := keys["/own"]; k[0] != "charge-77" {
		t.Fatalf("the task with its own key was sent with Idempotency-Key %q, want charge-77", k)
	}
}

// In cluster mode a task's ID is derived from its key: a key used again
// after tasks.key_ttl, while its task is still stored here, is answered
// from the task (the same request: 202 and its ID; another: 422), not
// refused as a task that exists.
func TestTaskKeyAfterKeyTTLInCluster(t *testing.T) {
	nc := gatewaytest.RunNATSCluster(t, 3)
	h := start(t, fmt.Sprintf(`  key_ttl: 1s
nats: {url: %q, replicas: 3, connect_timeout: 5s}
cluster: {enabled: true, claim_timeout: 10s}
`, nc.URL))
	body := `{"url":"http://public.test/hook","body":{"a":1}}`
	first := h.submit(t, "key-ttl", body)
	if first.status != 202 {
		t.Fatalf("first: %d %s", first.status, first.raw)
	}
	t0 := time.Now()
	waitFor(t, "tasks.key_ttl (1s) passed", func() (bool, string) {
		return time.Since(t0) > 1500*time.Millisecond, "waiting"
	})
	if a := h.submit(t, "key-ttl", body); a.status != 202 || a.body["id"] != first.body["id"] || !a.replayed {
		t.Errorf("the same request after key_ttl: %d %s (replayed %v); want 202 naming %v, replayed", a.status, a.raw, a.replayed, first.body["id"])
	}
	if a := h.submit(t, "key-ttl", `{"url":"http://public.test/hook","body":{"a":2}}`); a.status != 422 || a.code() != "idempotency_key_mismatch" {
		t.Errorf("another request after key_ttl: %d %s; want 422 idempotency_key_mismatch", a.status, a.raw)
	}
}

// Two different requests under one key reaching two gateways at the same
// moment (neither claim visible to the other when each looked) are one
// task: the request whose gateway claimed first is delivered and answered
// 202, the other is answered 422, and is never delivered, nor kept: asked
// again, it is 422 again, and its gateway comes to show the task
// delivered.
func TestTaskKeyAtOnceOnTwoGateways(t *testing.T) {
	nc := gatewaytest.RunNATSCluster(t, 3)
	var mu sync.Mutex
	got := map[string]int{} // requests by path
	downstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.URL.Path]++
		mu.Unlock()
	}))
	t.Cleanup(downstream.Close)
	extra := fmt.Sprintf(`nats: {url: %q, replicas: 3, duplicate_window: 1s, connect_timeout: 5s}
cluster: {enabled: true, claim_timeout: 10s}
`, nc.URL)
	gws := []*harness{start(t, extra), start(t, extra)}

	const keys = 20
	answers := make([][2]answer, keys)
	bodies := func(k int) [2]string {
		return [2]string{fmt.Sprintf(`{"url":"%s/k%d/gw0"}`, downstream.URL, k), fmt.Sprintf(`{"url":"%s/k%d/gw1"}`, downstream.URL, k)}
	}
	var wg sync.WaitGroup
	for k := range keys {
		for g := range 2 {
			wg.Go(func() {
				a, err := gws[g].post(token, fmt.Sprintf("key-%d", k), bodies(k)[g])
				if err != nil {
					t.Error(err)
				}
				answers[k][g] = a
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	winners := make([]int, keys)
	for k, a := range answers {
		switch {
		case a[0].status == 202 && a[1].status == 422 && a[1].code() == "idempotency_key_mismatch":
			winners[k] = 0
		case a[1].status == 202 && a[0].status == 422 && a[0].code() == "idempotency_key_mismatch":
			winners[k] = 1
		default:
			t.Fatalf("key-%d, another request at each gateway at once: %d %s and %d %s; want one 202, one 422",
				k, a[0].status, a[0].raw, a[1].status, a[1].raw)
		}
	}
	waitFor(t, "every task delivered", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= keys, fmt.Sprintf("%d delivered", len(got))
	})
	for k, w := range winners {
		loser := 1 - w
		if a, err := gws[loser].post(token, fmt.Sprintf("key-%d", k), bodies(k)[loser]); err != nil || a.status != 422 {
			t.Errorf("key-%d: the refused request again: %d %s (%v); want 422", k, a.status, a.raw, err)
		}
		id := answers[k][w].body["id"].(string)
		want := fmt.Sprintf("%s/k%d/gw%d", downstream.URL, k, w)
		waitFor(t, "the refusing gateway shows the task delivered", func() (bool, string) {
			a := gws[loser].do(t, http.MethodGet, "/v1/tasks/"+id, token, "", "")
			return a.status == 200 && a.body["url"] == want, a.raw
		})
	}
	mu.Lock()
	defer mu.Unlock()
	for k, w := range winners {
		if n, lost := got[fmt.Sprintf("/k%d/gw%d", k, w)], got[fmt.Sprintf("/k%d/gw%d", k, 1-w)]; n != 1 || lost != 0 {
			t.Errorf("key-%d: the request answered 202 delivered %d times, the one answered 422 %d times; want 1 and 0", k, n, lost)
		}
	}
}
