package cluster_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/app"
	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/store"
)

// In cluster mode too, a replay to a route added after the event (a new
// delivery), asked on a gateway that is not the event's origin, whose
// round fails follows the route's schedule: the event is published anew
// from there, and the route's consumer, on any gateway, runs its next
// round when due.
func TestFailedReplayOfNewDeliveryFollowsScheduleInCluster(t *testing.T) {
	nc := gatewaytest.RunNATSCluster(t, 3)
	var mu sync.Mutex
	sent := map[string]int{} // by path and event
	ds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		k := r.URL.Path + " " + r.Header.Get("X-Hookgate-Event-Id")
		mu.Lock()
		sent[k]++
		n := sent[k]
		mu.Unlock()
		if k == "/later e1" && n == 1 {
			w.WriteHeader(http.StatusInternalServerError) // the replay's round
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(ds.Close)
	count := func(k string) int {
		mu.Lock()
		defer mu.Unlock()
		return sent[k]
	}
	yaml := func(dir string, later bool) string {
		routes := fmt.Sprintf("  - {name: r, sources: [s], url: %q, retries: 0, schedule: [200ms, 200ms]}\n", ds.URL+"/r")
		if later {
			routes += fmt.Sprintf("  - {name: later, sources: [s], url: %q, retries: 0, schedule: [200ms, 200ms]}\n", ds.URL+"/later")
		}
		return fmt.Sprintf(`
listen: "127.0.0.1:0"
data_dir: %q
nats: {url: %q, replicas: 3}
cluster: {enabled: true}
api: {tokens: [%q]}
sources:
  - {name: s, verify: none, id_field: id, type_field: type}
routes:
%s`, dir, nc.URL, apiToken, routes)
	}
	ctx := context.Background()
	delivered := func(a *app.App, name, route, id string) {
		t.Helper()
		gatewaytest.WaitFor(t, fmt.Sprintf("%s %s succeeded on %s", route, id, name), 60*time.Second, func() (bool, string) {
			d, err := a.Store().Delivery(ctx, route, "s", id)
			if err != nil {
				return false, err.Error()
			}
			return d.State == store.StateSucceeded, fmt.Sprintf("%s after %d attempts", d.State, d.Attempts)
		})
	}
	dir1, dir2 := t.TempDir(), t.TempDir()
	gw1, gw2 := runGateway(t, "gw1", yaml(dir1, false)), runGateway(t, "gw2", yaml(dir2, false))
	post(t, gw1, "e1") // gw1 is its origin
	delivered(gw1, "gw1", "r", "e1")
	delivered(gw2, "gw2", "r", "e1")
	// Acked and dropped by the interest stream: the route added next is
	// not given it.
	js := connectJS(t, nc.URL)
	gatewaytest.WaitFor(t, "the events stream empty", 30*time.Second, func() (bool, string) {
		s, err := js.Stream(ctx, gw1.Broker().Stream())
		if err != nil {
			return false, err.Error()
		}
		info, err := s.Info(ctx)
		if err != nil {
			return false, err.Error()
		}
		return info.State.Msgs == 0, fmt.Sprint(info.State.Msgs, " messages")
	})
	for _, a := range []*app.App{gw1, gw2} {
		if err := a.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	gw1, gw2 = runGateway(t, "gw1", yaml(dir1, true)), runGateway(t, "gw2", yaml(dir2, true))
	// Once e2 is delivered, the starts put nothing back in the outbox
	// after it.
	post(t, gw1, "e2")
	delivered(gw2, "gw2", "later", "e2")
	if d, err := gw2.Store().Delivery(ctx, "later", "s", "e1"); err == nil {
		t.Fatalf("route later has a delivery of e1 before the replay: %+v", d)
	}

	if code, body := apiPost(t, gw2, "/v1/events/s/e1/replay?route=later"); code != http.StatusAccepted {
		t.Fatalf("replay on gw2: %d %s", code, body)
	}
	delivered(gw2, "gw2", "later", "e1")
	delivered(gw1, "gw1", "later", "e1")
	if n := count("/later e1"); n != 2 {
		t.Errorf("later got e1 %d times, want 2 (the failed replay, the schedule's next round)", n)
	}
	if n := count("/r e1"); n != 1 {
		t.Errorf("r got e1 %d times, want 1", n)
	}
}
