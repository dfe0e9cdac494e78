package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/app"
	"github.com/hookgate/hookgate/cluster"
	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/store"
)

// An operator's retry or replay asked on one gateway shows the delivery
// pending on every gateway soon after it is answered, while its round
// still runs: the reset is a record of its own (HOOKGATE_RECORDS), not
// only the round that follows it. The downstream answers 410 (dead) until
// revived, then holds each request until released; the records of the
// rounds cannot be what shows pending.
func TestResetShownOnOtherGateways(t *testing.T) {
	nc := gatewaytest.RunNATSCluster(t, 3)
	var mu sync.Mutex
	revived := false
	held := map[string]int{}
	release := make(chan struct{})
	ds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		ok := revived
		if ok {
			held[r.Header.Get("X-Hookgate-Event-Id")]++
		}
		mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusGone)
			return
		}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(ds.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	gw1 := replicaGateway(t, "gw1", nc.URL, ds.URL, t.TempDir())
	gw2 := replicaGateway(t, "gw2", nc.URL, ds.URL, t.TempDir())
	ids := []string{"dead-retried", "dead-replayed"}
	for _, id := range ids {
		post(t, gw1, id)
	}
	waitState := func(a *app.App, name, id, want string, within time.Duration) {
		t.Helper()
		gatewaytest.WaitFor(t, fmt.Sprintf("%s %s on %s", id, want, name), within, func() (bool, string) {
			_, state, attempts, _ := eventOn(t, a, id)
			return state == want, fmt.Sprintf("%s after %d attempts", state, attempts)
		})
	}
	for _, id := range ids {
		waitState(gw1, "gw1", id, store.StateDead, 60*time.Second)
		waitState(gw2, "gw2", id, store.StateDead, 60*time.Second)
	}
	mu.Lock()
	revived = true
	mu.Unlock()
	heldOf := func(id string) func() (bool, string) {
		return func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			return held[id] == 1, fmt.Sprint(held[id], " requests held")
		}
	}

	// A retry asked on gw1 is shown pending on gw2 while its request is
	// held (well within the route's 30 s timeout: the round's own record
	// comes after it).
	uid := deadOn(t, gw1)["dead-retried"]
	if code, body := apiPost(t, gw1, "/v1/deliveries/"+uid+"/retry"); code != http.StatusAccepted {
		t.Fatalf("retry on gw1: %d %s", code, body)
	}
	gatewaytest.WaitFor(t, "the retry's request held", 30*time.Second, heldOf("dead-retried"))
	waitState(gw2, "gw2", "dead-retried", store.StatePending, 15*time.Second)

	// A replay asked on gw2, shown on gw1.
	if code, body := apiPost(t, gw2, "/v1/events/s/dead-replayed/replay?route=r"); code != http.StatusAccepted {
		t.Fatalf("replay on gw2: %d %s", code, body)
	}
	gatewaytest.WaitFor(t, "the replay's request held", 30*time.Second, heldOf("dead-replayed"))
	waitState(gw1, "gw1", "dead-replayed", store.StatePending, 15*time.Second)

	// The rounds' outcomes, newer than the resets, are shown everywhere.
	close(release)
	for _, id := range ids {
		waitState(gw1, "gw1", id, store.StateSucceeded, 60*time.Second)
		waitState(gw2, "gw2", id, store.StateSucceeded, 60*time.Second)
	}
}

// A reset's record carries the revision the reset wrote in the bucket,
// and a reset put back by an operator's round that ran nothing (its
// route paused meanwhile) is recorded at its release with the release's
// revision, so that the other gateways, which applied the reset, show
// the state put back.
func TestResetAndPutBackRecorded(t *testing.T) {
	nc := gatewaytest.RunNATSCluster(t, 3)
	ctx := context.Background()
	st := openStore(t)
	js := connectJS(t, nc.URL)
	a := cluster.NewDeliveryState(func() natsjs.JetStream { return js }, st, cluster.DeliveryStateConfig{
		Replicas: 3, Owner: "gw-a", Origin: "gw-a", Replica: st, Routes: []outbound.Route{{Name: "r"}}}, testLog())
	k := adopt(t, st, "r", "s", "e1")
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !a.Claim(cctx, k) {
		t.Fatal("no claim within 30s")
	}
	d := delivery(k, store.StateDead)
	if err := a.Record(ctx, d, []store.Attempt{{StartedAt: time.Now(), Status: 500}}); err != nil {
		t.Fatal(err)
	}
	a.Release(k)
	drain := func() []store.OutRecord {
		t.Helper()
		out, err := st.RecordsOut(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]int64, len(out))
		for i, o := range out {
			ids[i] = o.ID
		}
		if err := st.DeleteRecordsOut(ctx, ids); err != nil {
			t.Fatal(err)
		}
		return out
	}
	drain()
	kv, err := js.KeyValue(ctx, cluster.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	entry := func() (string, uint64) {
		t.Helper()
		e, err := kv.Get(ctx, cluster.DeliveryKey("r", "s", "e1"))
		if err != nil {
			t.Fatal(err)
		}
		return string(e.Value()), e.Revision()
	}
	stateOf := func(o store.OutRecord) store.StateRecord {
		t.Helper()
		var sr store.StateRecord
		if o.Subject != store.StateRecordSubject {
			t.Fatalf("a record on %s, want %s", o.Subject, store.StateRecordSubject)
		}
		if err := json.Unmarshal(o.Data, &sr); err != nil {
			t.Fatal(err)
		}
		return sr
	}

	rec, _, err := a.Reset(ctx, k, false)
	if err != nil || rec == nil {
		t.Fatalf("reset: %+v, %v", rec, err)
	}
	if ok, err := st.SetClusterDeliveryState(ctx, d.ID, store.StatePending, rec); err != nil || !ok {
		t.Fatalf("local reset: %v, %v", ok, err)
	}
	out := drain()
	value, rev := entry()
	if len(out) != 1 {
		t.Fatalf("%d records after the reset, want 1", len(out))
	}
	if sr := stateOf(out[0]); sr.State != store.StatePending || sr.Version != rev || sr.Attempts != 1 || sr.Origin != "gw-a" {
		t.Fatalf("the reset's record %+v; want pending at the entry's revision %d (%s)", sr, rev, value)
	}

	if !a.TryClaim(ctx, k) {
		t.Fatal("the operator's round's claim refused")
	}
	a.Unreset(k, store.StateDead)
	if _, err := st.SetDeliveryState(ctx, d.ID, store.StateDead); err != nil {
		t.Fatal(err)
	}
	a.Release(k)
	out = drain()
	value, rev = entry()
	if len(out) != 1 {
		t.Fatalf("%d records after the put-back, want 1", len(out))
	}
	if sr := stateOf(out[0]); sr.State != store.StateDead || sr.Version != rev {
		t.Fatalf("the put-back's record %+v; want dead at the entry's revision %d (%s)", sr, rev, value)
	}
}
