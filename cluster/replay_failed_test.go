package cluster_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/cluster"
	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/store"
)

// A replay whose round fails leaves the delivery as it was (dead), in
// cluster mode as on one gateway: the round must go on from the state it
// was asked on, not from the cluster's entry as the replay's reset wrote
// it (pending).
func TestFailedReplayLeavesDeadInCluster(t *testing.T) {
	urls := runNATSCluster(t, 3)
	var sent atomic.Int32
	ds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if sent.Add(1) == 1 {
			w.WriteHeader(http.StatusGone) // dead at its first round
			return
		}
		w.WriteHeader(http.StatusInternalServerError) // the replay fails
	}))
	t.Cleanup(ds.Close)
	gw := startGateway(t, "gw1", urls, ds.URL)
	post(t, gw, "e1")
	ctx := context.Background()
	gatewaytest.WaitFor(t, "e1 dead", 60*time.Second, func() (bool, string) {
		d, err := gw.Store().Delivery(ctx, "r", "s", "e1")
		if err != nil {
			return false, err.Error()
		}
		return d.State == store.StateDead, d.State
	})
	if code, body := apiPost(t, gw, "/v1/events/s/e1/replay?route=r"); code != http.StatusAccepted {
		t.Fatalf("replay: %d %s", code, body)
	}
	js := connectJS(t, urls[0])
	entry := func() string {
		kv, err := js.KeyValue(ctx, cluster.DefaultBucket)
		if err != nil {
			return err.Error()
		}
		e, err := kv.Get(ctx, cluster.DeliveryKey("r", "s", "e1"))
		if err != nil {
			return err.Error()
		}
		return string(e.Value())
	}
	gatewaytest.WaitFor(t, "the replay's round recorded", 60*time.Second, func() (bool, string) {
		d, err := gw.Store().Delivery(ctx, "r", "s", "e1")
		if err != nil {
			return false, err.Error()
		}
		return d.Attempts == 2 && strings.Contains(entry(), `"attempts":2`) && !strings.Contains(entry(), `"owner":"`),
			fmt.Sprintf("local %s %d attempts; cluster %s", d.State, d.Attempts, entry())
	})
	d, err := gw.Store().Delivery(ctx, "r", "s", "e1")
	if err != nil {
		t.Fatal(err)
	}
	if d.State != store.StateDead || !strings.Contains(entry(), `"state":"dead"`) {
		t.Fatalf("after a failed replay: local %s, cluster %s; want dead (as it was)", d.State, entry())
	}
}
