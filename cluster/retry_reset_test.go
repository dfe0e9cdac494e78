package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/cluster"
	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/store"
)

// An operator's retry in cluster mode whose gateway stops before the
// retry's round gets its lease runs at that gateway's next start: the
// reset to pending is the cluster's (HOOKGATE_DELIVERIES) before the
// retry is answered, so the round of the event put back in the outbox
// finds the delivery pending there, not dead. The retry's round is held
// before its claim deterministically: it waits for a slot of its task
// token, whose only one a hanging task holds.
func TestRetryStoppedBeforeItsLeaseRunsAtNextStart(t *testing.T) {
	nc := gatewaytest.RunNATSCluster(t, 3)
	var mu sync.Mutex
	revived := false
	hang := make(chan struct{})
	var deadSent, hanging int
	ds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/hang":
			mu.Lock()
			hanging++
			mu.Unlock()
			select {
			case <-hang:
			case <-r.Context().Done():
				return
			}
		case "/dead":
			mu.Lock()
			deadSent++
			ok := revived
			mu.Unlock()
			if !ok {
				w.WriteHeader(http.StatusGone)
				return
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(ds.Close)
	t.Cleanup(func() {
		select {
		case <-hang:
		default:
			close(hang)
		}
	})
	sent := func() int {
		mu.Lock()
		defer mu.Unlock()
		return deadSent
	}
	dir := t.TempDir()
	yaml := fmt.Sprintf(`
listen: "127.0.0.1:0"
data_dir: %q
nats: {url: %q, replicas: 3}
cluster: {enabled: true}
api: {tokens: [%q]}
sources:
  - {name: s, verify: none, id_field: id, type_field: type}
routes:
  - {name: r, sources: [s], url: %q}
tasks: {tokens: [%q], allow: [127.0.0.1], retries: 0, schedule: [50ms], timeout: 60s, token_concurrency: 1}
`, dir, nc.URL, apiToken, ds.URL, taskTokenA)
	gw := runGateway(t, "gw1", yaml)
	submit := func(key, path string) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+gw.Addr()+"/v1/tasks",
			strings.NewReader(fmt.Sprintf(`{"url":%q}`, ds.URL+path)))
		req.Header.Set("Authorization", "Bearer "+taskTokenA)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var task struct{ ID string }
		if err := json.NewDecoder(resp.Body).Decode(&task); err != nil || resp.StatusCode != http.StatusAccepted {
			t.Fatalf("task %s: %d %v", key, resp.StatusCode, err)
		}
		return task.ID
	}
	deadID := submit("dead", "/dead")
	var uid string
	gatewaytest.WaitFor(t, "the task dead", 60*time.Second, func() (bool, string) {
		uid = deadOn(t, gw)[deadID]
		return uid != "", fmt.Sprint(deadOn(t, gw))
	})
	// The token's one slot taken by a task whose request hangs.
	submit("hang", "/hang")
	gatewaytest.WaitFor(t, "the hanging task's request held", 60*time.Second, func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return hanging == 1, fmt.Sprint(hanging, " requests held")
	})

	mu.Lock()
	revived = true
	mu.Unlock()
	if code, body := apiPost(t, gw, "/v1/deliveries/"+uid+"/retry"); code != http.StatusAccepted {
		t.Fatalf("retry: %d %s", code, body)
	}
	// Stopped while the retry's round waits for the token's slot.
	stopCtx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_ = gw.Stop(stopCtx)
	cancel()
	if n := sent(); n != 1 {
		t.Fatalf("the dead task was sent %d times before the restart, want 1 (the retry's round never ran)", n)
	}
	close(hang)

	gw = runGateway(t, "gw1", yaml)
	gatewaytest.WaitFor(t, "the retry run after the restart", 60*time.Second, func() (bool, string) {
		d, err := gw.Store().Delivery(context.Background(), outbound.TaskRoute, store.TaskSource, deadID)
		if err != nil {
			return false, err.Error()
		}
		return d.State == store.StateSucceeded && sent() == 2, fmt.Sprintf("local %s, %d attempts; sent %d times; cluster %s",
			d.State, d.Attempts, sent(), clusterState(t, nc.URL, deadID))
	})
	if got := clusterState(t, nc.URL, deadID); !strings.Contains(got, `"state":"succeeded"`) {
		t.Fatalf("the cluster's state %s, want succeeded", got)
	}
}

// clusterState is the HOOKGATE_DELIVERIES entry of task id's delivery.
func clusterState(t *testing.T, urls, id string) string {
	t.Helper()
	js := connectJS(t, strings.Split(urls, ",")[0])
	kv, err := js.KeyValue(context.Background(), cluster.DefaultBucket)
	if err != nil {
		return err.Error()
	}
	e, err := kv.Get(context.Background(), cluster.DeliveryKey(outbound.TaskRoute, store.TaskSource, id))
	if err != nil {
		return err.Error()
	}
	return string(e.Value())
}
