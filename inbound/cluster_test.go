package inbound

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/cluster"
	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// In cluster mode, a copy of an event another gateway holds is answered
// duplicate, though stored here (a later copy is a local duplicate); with
// NATS gone, intake answers accepted within ClusterTimeout.
func TestClusterClaimAtIntake(t *testing.T) {
	srv := gatewaytest.RunNATS(t, 0, t.TempDir())
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	gateway := func(name string) *harness {
		c, err := cluster.New(cluster.Config{Gateway: name, TTL: time.Hour,
			JetStream: func() natsjs.JetStream { return js }})
		if err != nil {
			t.Fatal(err)
		}
		return newHarnessWith(t, Options{Cluster: c, ClusterTimeout: 300 * time.Millisecond})
	}
	a, b := gateway("gw-a"), gateway("gw-b")
	body := stripeEvent("evt_1", "invoice.paid")
	post := func(h *harness, body []byte) answer {
		return h.post(t, "stripe", body, stripeHeader(body, stripeSecret, h.clock()))
	}
	if got := post(a, body); got.status != 200 || got.body["status"] != "accepted" {
		t.Fatalf("first copy at a: %d %v", got.status, got.body)
	}
	for i := range 2 {
		if got := post(b, body); got.status != 200 || got.body["status"] != "duplicate" {
			t.Fatalf("copy %d at b: %d %v, want duplicate", i+2, got.status, got.body)
		}
	}
	if ev := b.stored(t, "stripe", "evt_1"); ev == nil {
		t.Fatal("the copy at b is not stored there")
	}

	srv.Shutdown()
	srv.WaitForShutdown()
	start := time.Now()
	body = stripeEvent("evt_2", "invoice.paid")
	if got := post(b, body); got.status != 200 || got.body["status"] != "accepted" {
		t.Fatalf("a copy with NATS gone: %d %v, want accepted", got.status, got.body)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("intake with NATS gone took %s", took)
	}
}
