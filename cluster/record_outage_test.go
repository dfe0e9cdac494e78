package cluster_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/cluster"
	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/store"
)

// A round whose outcome cannot be written (the bucket lost its quorum
// during the round) writes it when its lease is released, once NATS is
// back: the delivery that succeeded reads as succeeded to every gateway,
// and is not sent again.
func TestOutcomeWrittenOnRelease(t *testing.T) {
	nc := gatewaytest.RunNATSCluster(t, 3)
	ctx := context.Background()
	cfg := cluster.DeliveryStateConfig{Replicas: 3, Wait: time.Second,
		Routes: []outbound.Route{{Name: "r", Timeout: time.Second}}}
	a, sta := gatewayState(t, nc.URL, "gw-a", cfg)
	b, stb := gatewayState(t, nc.URL, "gw-b", cfg)
	ka, kb := adopt(t, sta, "r", "s", "e1"), adopt(t, stb, "r", "s", "e1")
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second) // the bucket is made at first use
	defer cancel()
	if !a.Claim(cctx, ka) {
		t.Fatal("no claim within 30s")
	}
	nc.Stop(1) // no quorum: the outcome cannot be written
	nc.Stop(2)
	if err := a.Record(ctx, delivery(ka, store.StateSucceeded), []store.Attempt{{StartedAt: time.Now(), Status: 200}}); err == nil {
		t.Fatal("an outcome written without a quorum")
	}
	nc.Start(t, 1)
	nc.Start(t, 2)
	nc.WaitLeader(t)
	gatewaytest.WaitFor(t, "a leader of the deliveries bucket", 30*time.Second, func() (bool, string) {
		for _, s := range nc.Servers {
			if s != nil && s.JetStreamIsStreamLeader("$G", "KV_HOOKGATE_DELIVERIES") {
				return true, ""
			}
		}
		return false, "none"
	})
	a.Release(ka)
	gatewaytest.WaitFor(t, "b reads the delivery as succeeded", 10*time.Second, func() (bool, string) {
		st, err := b.Status(ctx, "r", kb.Seq, "s", "e1")
		return err == nil && st.State == store.StateSucceeded, fmt.Sprintf("%+v, %v", st, err)
	})
}

// A round whose outcome can be written neither by Record nor at its
// release (the bucket has no quorum through both) writes it once the
// bucket answers again, while its lease holds: the succeeded delivery
// reads as succeeded to every gateway, and no other gateway claims a
// round of it after the lease.
func TestOutcomeWrittenAfterFailedRelease(t *testing.T) {
	nc := gatewaytest.RunNATSCluster(t, 3)
	ctx := context.Background()
	// The tries end with the lease: it outlasts the nodes' restart,
	// however slow, and nothing here waits for its end.
	cfg := cluster.DeliveryStateConfig{Replicas: 3, Wait: time.Second, LeaseMargin: 10 * time.Minute,
		Routes: []outbound.Route{{Name: "r", Timeout: time.Second}}}
	a, sta := gatewayState(t, nc.URL, "gw-a", cfg)
	b, stb := gatewayState(t, nc.URL, "gw-b", cfg)
	ka, kb := adopt(t, sta, "r", "s", "e1"), adopt(t, stb, "r", "s", "e1")
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second) // the bucket is made at first use
	defer cancel()
	if !a.Claim(cctx, ka) {
		t.Fatal("no claim within 30s")
	}
	nc.Stop(1) // no quorum: neither the outcome nor the release can be written
	nc.Stop(2)
	if err := a.Record(ctx, delivery(ka, store.StateSucceeded), []store.Attempt{{StartedAt: time.Now(), Status: 200}}); err == nil {
		t.Fatal("an outcome written without a quorum")
	}
	a.Release(ka)
	nc.Start(t, 1)
	nc.Start(t, 2)
	nc.WaitLeader(t)
	gatewaytest.WaitFor(t, "b reads the delivery as succeeded", 30*time.Second, func() (bool, string) {
		st, err := b.Status(ctx, "r", kb.Seq, "s", "e1")
		return err == nil && st.State == store.StateSucceeded, fmt.Sprintf("%+v, %v", st, err)
	})
	// a's claim is let go once the outcome is written: its next claim
	// reads the outcome.
	gatewaytest.WaitFor(t, "a's next claim", 30*time.Second, func() (bool, string) {
		return a.TryClaim(ctx, ka), "refused"
	})
	st, err := a.Status(ctx, "r", ka.Seq, "s", "e1")
	a.Release(ka)
	if err != nil || st.State != store.StateSucceeded {
		t.Fatalf("a's next claim reads %+v, %v; want succeeded", st, err)
	}
}

// An outcome still tried again in the background when the gateway stops
// (the bucket without a quorum) ends with Stop: one last try within the
// shutdown's context, the outcome given up logged, and nothing left
// running to write once the broker and the store are closed.
func TestStopEndsOutcomeTries(t *testing.T) {
	nc := gatewaytest.RunNATSCluster(t, 3)
	ctx := context.Background()
	var log gatewaytest.SyncBuffer
	st := openStore(t)
	js := connectJS(t, nc.URL)
	a := cluster.NewDeliveryState(func() natsjs.JetStream { return js }, st, cluster.DeliveryStateConfig{Owner: "gw-a",
		Replicas: 3, Wait: time.Second, LeaseMargin: 10 * time.Minute, Routes: []outbound.Route{{Name: "r", Timeout: time.Second}}},
		slog.New(slog.NewTextHandler(&log, nil)))
	k := adopt(t, st, "r", "s", "e1")
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second) // the bucket is made at first use
	defer cancel()
	if !a.Claim(cctx, k) {
		t.Fatal("no claim within 30s")
	}
	nc.Stop(1) // no quorum until the end
	nc.Stop(2)
	if err := a.Record(ctx, delivery(k, store.StateSucceeded), []store.Attempt{{StartedAt: time.Now(), Status: 200}}); err == nil {
		t.Fatal("an outcome written without a quorum")
	}
	a.Release(k) // tried again in the background: the lease holds 10 minutes
	sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
	defer scancel()
	stopped := make(chan error, 1)
	go func() { stopped <- a.Stop(sctx) }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Stop = %v", err)
		}
	case <-time.After(time.Minute): // a hang, not a timing
		t.Fatal("Stop did not return within a minute, its context 2s")
	}
	// A try that returned may still be on its way out; one left running
	// sleeps until the lease ends (10 minutes).
	mine := fmt.Sprintf("(*DeliveryState).releaseLater(%p", a)
	gatewaytest.WaitFor(t, "no try of the outcome running after Stop", 10*time.Second, func() (bool, string) {
		for _, g := range strings.Split(stacks(), "\n\n") {
			if strings.Contains(g, mine) {
				return false, g
			}
		}
		return true, ""
	})
	if !strings.Contains(log.String(), "given up") {
		t.Fatalf("the outcome given up at Stop is not logged; the log:\n%s", log.String())
	}
}

// stacks is every goroutine's stack.
func stacks() string {
	for buf := make([]byte, 1<<20); ; buf = make([]byte, 2*len(buf)) {
		if n := runtime.Stack(buf, true); n < len(buf) {
			return string(buf[:n])
		}
	}
}
