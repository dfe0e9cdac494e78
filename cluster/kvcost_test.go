package cluster_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/app"
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/jetstream"
)

// kvOps counts the requests made of the delivery-state bucket, seen by a
// plain subscriber: writes (a put or compare-and-set on $KV.<bucket>.>,
// refused ones included) and reads (direct or API gets of its stream).
type kvOps struct{ reads, writes atomic.Int64 }

func countKVOps(t *testing.T, url, bucket string) (*kvOps, *nats.Conn) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ops := &kvOps{}
	for subj, n := range map[string]*atomic.Int64{
		"$KV." + bucket + ".>":                   &ops.writes,
		"$JS.API.DIRECT.GET.KV_" + bucket + ".>": &ops.reads,
		"$JS.API.DIRECT.GET.KV_" + bucket:        &ops.reads,
		"$JS.API.STREAM.MSG.GET.KV_" + bucket:    &ops.reads,
	} {
		if _, err := nc.Subscribe(subj, func(*nats.Msg) { n.Add(1) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return ops, nc
}

// A delivery in cluster mode costs the bucket what correctness needs: the
// lease claimed by one compare-and-set and the outcome written by one,
// for an event this gateway stored first (no Hookgate-Seq) and for one
// another gateway accepted (a Hookgate-Seq of another store, adopted
// here) alike; no read when the entry does not exist yet.
func TestClusterKVOpsPerDelivery(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	urls := []string{srv.ClientURL()}
	ds := newKeyed(t, func(*http.Request, string, int) int { return http.StatusNoContent })
	yaml := fmt.Sprintf(`
listen: "127.0.0.1:0"
data_dir: %q
nats: {url: %q, replicas: 1}
cluster: {enabled: true}
api: {tokens: [%q]}
sources:
  - {name: s, verify: none, id_field: id, type_field: type}
routes:
  - {name: r, sources: [s], url: %q, retries: 0, timeout: 30s, breaker_threshold: 0}
`, t.TempDir(), urls[0], apiToken, ds.URL)
	cfg, err := config.Parse([]byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	a := app.New(cfg, testLog())
	if err := a.Start(context.Background()); err != nil {
		_ = a.Stop(context.Background())
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop(context.Background()) })

	p := newPublisher(t, urls)
	p.publish("warm", 0) // the bucket made, the consumer running
	delivered := func(ids ...string) {
		t.Helper()
		gatewaytest.WaitFor(t, "every event delivered", 90*time.Second, func() (bool, string) {
			for _, id := range ids {
				if got, _ := successes(ds.of(id)); got == 0 {
					return false, id + " not yet"
				}
			}
			return true, ""
		})
	}
	delivered("warm") // a drained stream alone may be one the relay has not published to yet
	p.drained()
	ops, nc := countKVOps(t, urls[0], "HOOKGATE_DELIVERIES")
	const n = 20
	for i := range n {
		p.publish("own-"+strconv.Itoa(i), 0)
		h := nats.Header{}
		h.Set(jetstream.HeaderSource, "s")
		h.Set(jetstream.HeaderEventID, "other-"+strconv.Itoa(i))
		h.Set(jetstream.HeaderEventType, "t")
		h.Set(jetstream.HeaderSeq, strconv.Itoa(1_000_000+i)) // another store's seq
		h.Set("Content-Type", "application/json")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := p.js.PublishMsg(ctx, &nats.Msg{Subject: jetstream.Subject("s", "t"), Header: h,
			Data: []byte(fmt.Sprintf(`{"id":"other-%d","type":"t"}`, i))}, natsjs.WithMsgID("other:"+strconv.Itoa(i)))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	for i := range n {
		ids = append(ids, "own-"+strconv.Itoa(i), "other-"+strconv.Itoa(i))
	}
	delivered(ids...)
	p.drained()
	if err := nc.Flush(); err != nil { // what the server sent before is read
		t.Fatal(err)
	}
	for i := range n {
		for _, id := range []string{"own-" + strconv.Itoa(i), "other-" + strconv.Itoa(i)} {
			if got, _ := successes(ds.of(id)); got != 1 {
				t.Errorf("%s: %d successful deliveries, want 1", id, got)
			}
		}
	}
	reads, writes := ops.reads.Load(), ops.writes.Load()
	t.Logf("%d deliveries: %d KV reads, %d KV writes", 2*n, reads, writes)
	// Two writes each; a little slack for a redelivered message.
	if total := reads + writes; total > 2*2*n+4 {
		t.Errorf("%d KV requests for %d deliveries (%d reads, %d writes), want at most 2 each (claim, outcome)",
			total, 2*n, reads, writes)
	}
}
