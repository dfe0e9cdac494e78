package cluster_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/store"
)

// An operator's retry asked on a gateway that is not the event's origin,
// whose round is cut short by that gateway's stop, runs after its next
// start: the event reached that gateway as a record, never published
// there, and is published anew from there all the same.
func TestRetryCutShortOnOtherGatewayRunsAtNextStart(t *testing.T) {
	nc := gatewaytest.RunNATSCluster(t, 3)
	var n atomic.Int32
	var inflight atomic.Int32
	ds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		switch n.Add(1) {
		case 1:
			w.WriteHeader(http.StatusGone) // dead at its first round
			return
		case 2: // the operator's retry on gw2: held until gw2 stops
			inflight.Add(1)
			<-r.Context().Done()
			inflight.Add(-1)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(ds.Close)
	dir2 := t.TempDir()
	gw1 := replicaGateway(t, "gw1", nc.URL, ds.URL, t.TempDir())
	gw2 := replicaGateway(t, "gw2", nc.URL, ds.URL, dir2)
	post(t, gw1, "e1") // gw1 is its origin
	ctx := context.Background()
	var uid string
	gatewaytest.WaitFor(t, "e1 dead on gw2", 60*time.Second, func() (bool, string) {
		uid = deadOn(t, gw2)["e1"]
		return uid != "", fmt.Sprint(deadOn(t, gw2))
	})
	if code, body := apiPost(t, gw2, "/v1/deliveries/"+uid+"/retry"); code != http.StatusAccepted {
		t.Fatalf("retry on gw2: %d %s", code, body)
	}
	gatewaytest.WaitFor(t, "the retry's request held", 60*time.Second, func() (bool, string) {
		return inflight.Load() == 1, fmt.Sprint(n.Load(), " requests")
	})
	stopCtx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_ = gw2.Stop(stopCtx)
	cancel()
	gw2 = replicaGateway(t, "gw2", nc.URL, ds.URL, dir2)
	gatewaytest.WaitFor(t, "the retry run after gw2's restart", 60*time.Second, func() (bool, string) {
		d, err := gw2.Store().Delivery(ctx, "r", "s", "e1")
		if err != nil {
			return false, err.Error()
		}
		return d.State == store.StateSucceeded, fmt.Sprintf("gw2 %s, %d attempts; %d requests", d.State, d.Attempts, n.Load())
	})
}
