package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/cluster"
	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/store"
)

// runNATSCluster starts an n-node JetStream cluster and returns its
// servers' client URLs.
func runNATSCluster(t *testing.T, n int) []string {
	t.Helper()
	c := gatewaytest.RunNATSCluster(t, n)
	urls := make([]string, n)
	for i, s := range c.Servers {
		urls[i] = s.ClientURL()
	}
	return urls
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func testLog() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return discard()
}

// gatewayState is one gateway's delivery state: its own store, its own
// connection to one node of the cluster.
func gatewayState(t *testing.T, url, owner string, cfg cluster.DeliveryStateConfig) (*cluster.DeliveryState, *store.Store) {
	t.Helper()
	st := openStore(t)
	js := connectJS(t, url)
	cfg.Owner = owner
	s := cluster.NewDeliveryState(func() natsjs.JetStream { return js }, st, cfg, testLog())
	t.Cleanup(func() { _ = s.Stop(context.Background()) }) // before the store closes
	return s, st
}

// openStore opens a store in t.TempDir(), closed when the test ends.
func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), store.Config{Path: filepath.Join(t.TempDir(), "hookgate.db")}, discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// connectJS connects to url (reconnecting without end, every 100 ms)
// and returns its JetStream context; closed when the test ends.
func connectJS(t *testing.T, url string) natsjs.JetStream {
	t.Helper()
	conn, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	js, err := natsjs.New(conn)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// adopt stores the event in st and returns its delivery key on route r.
func adopt(t *testing.T, st *store.Store, r, source, id string) outbound.DeliveryKey {
	t.Helper()
	seq, _, err := st.AdoptEvent(context.Background(), &store.Event{Source: source, ID: id, Type: "t", Body: []byte("{}")}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return outbound.DeliveryKey{Route: r, Seq: seq, Source: source, EventID: id}
}

func delivery(k outbound.DeliveryKey, state string) *store.Delivery {
	d := &store.Delivery{EventSeq: k.Seq, Route: k.Route, Source: k.Source, EventID: k.EventID, EventType: "t",
		IdempotencyKey: outbound.IdempotencyKey(k.Route, k.Source, k.EventID), State: state, LastStatus: 500}
	if state == store.StateRetrying {
		d.Rounds, d.NextAttemptAt = 1, time.Now().Add(time.Hour)
	}
	return d
}

// One round of a delivery at a time in the cluster; a gateway that dies
// holding a round's lease is taken over once the lease ends, and then
// cannot overwrite what the other recorded; what one gateway recorded is
// what every other reads.
func TestLeaseAcrossGateways(t *testing.T) {
	urls := runNATSCluster(t, 3)
	ctx := context.Background()
	cfg := cluster.DeliveryStateConfig{Replicas: 3, LeaseMargin: 500 * time.Millisecond,
		Routes: []outbound.Route{{Name: "r", Timeout: 500 * time.Millisecond}}}
	a, sta := gatewayState(t, urls[0], "gw-a", cfg)
	b, stb := gatewayState(t, urls[1], "gw-b", cfg)
	adopt(t, stb, "r", "s", "e0") // the same event has another seq on b
	ka, kb := adopt(t, sta, "r", "s", "e1"), adopt(t, stb, "r", "s", "e1")

	// The bucket was just made: its stream may not have a leader yet.
	gatewaytest.WaitFor(t, "a's first claim", 30*time.Second, func() (bool, string) {
		return a.TryClaim(ctx, ka), "refused"
	})
	if a.TryClaim(ctx, ka) {
		t.Fatal("a second claim in the same gateway while the first holds")
	}
	if b.TryClaim(ctx, kb) {
		t.Fatal("another gateway claimed a round under a running lease")
	}
	// a dies holding the lease (no record, no release): b takes over once
	// it ends (1s: 500ms round + 500ms margin).
	gatewaytest.WaitFor(t, "b's claim after a's lease ended", 30*time.Second, func() (bool, string) {
		return b.TryClaim(ctx, kb), "refused"
	})
	if err := a.Record(ctx, delivery(ka, store.StateSucceeded), []store.Attempt{{StartedAt: time.Now(), Status: 200}}); !errors.Is(err, cluster.ErrFenced) {
		t.Fatalf("record under a lease taken over: %v, want ErrFenced", err)
	}
	if d, err := sta.Delivery(ctx, "r", "s", "e1"); err != nil || d.Attempts != 1 {
		t.Fatalf("the fenced round is recorded where it ran: %+v, %v", d, err)
	}
	a.Release(ka)
	if st, err := b.Status(ctx, "r", kb.Seq, "s", "e1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("b's status after a fenced round: %+v, %v; want not found", st, err)
	}
	if err := b.Record(ctx, delivery(kb, store.StateDead), []store.Attempt{{StartedAt: time.Now(), Status: 500}}); err != nil {
		t.Fatal(err)
	}
	b.Release(kb)

	// a reads the dead delivery b recorded (its own record says succeeded).
	if !a.TryClaim(ctx, ka) {
		t.Fatal("claim after b's round was recorded refused")
	}
	st, err := a.Status(ctx, "r", ka.Seq, "s", "e1")
	if err != nil || st.State != store.StateDead || st.Attempts != 1 {
		t.Fatalf("a's status: %+v, %v; want dead after b's one attempt", st, err)
	}
	a.Release(ka)
	if !b.TryClaim(ctx, kb) {
		t.Fatal("a's release did not end its claim")
	}
	b.Release(kb)

	// Retrying: the attempts of the whole cluster add up.
	if !a.TryClaim(ctx, ka) {
		t.Fatal("claim refused")
	}
	d := delivery(ka, store.StateRetrying)
	if err := a.Record(ctx, d, []store.Attempt{{StartedAt: time.Now(), Status: 500}, {StartedAt: time.Now(), Status: 500}}); err != nil {
		t.Fatal(err)
	}
	a.Release(ka)
	if d.Attempts != 3 {
		t.Fatalf("attempts after b's 1 and a's 2: %d", d.Attempts)
	}
	st, err = b.Status(ctx, "r", kb.Seq, "s", "e1")
	if err != nil || st.State != store.StateRetrying || st.Attempts != 3 || st.NextAttemptAt.IsZero() {
		t.Fatalf("b's status: %+v, %v", st, err)
	}
}

// Without the cluster's bucket no round is claimed: the message waits.
func TestNoClaimWithoutNATS(t *testing.T) {
	t.Parallel()
	url := fmt.Sprintf("nats://127.0.0.1:%d", gatewaytest.FreePort(t)) // nobody listens
	st, err := store.Open(context.Background(), store.Config{Path: filepath.Join(t.TempDir(), "hookgate.db")}, discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	nc, err := nats.Connect(url, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := natsjs.New(nc)
	s := cluster.NewDeliveryState(func() natsjs.JetStream { return js }, st, cluster.DeliveryStateConfig{Wait: 200 * time.Millisecond}, discard())
	k := adopt(t, st, "r", "s", "e1")
	if s.TryClaim(context.Background(), k) {
		t.Fatal("a round claimed without NATS")
	}
	short, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if s.Claim(short, k) {
		t.Fatal("an operator's round claimed without NATS")
	}
	if _, err := s.Status(context.Background(), "r", k.Seq, "s", "e1"); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("status without NATS: %v, want unavailable", err)
	}
}

// An operator's reset is written to the cluster's state, never over a
// running round's lease (whose outcome is then written as ever), and a
// retry of a delivery the cluster holds succeeded is refused; undo puts
// back what the reset wrote over unless something was written since, and
// Unreset makes an operator's round that ran nothing put it back at its
// release.
func TestResetAcrossGateways(t *testing.T) {
	urls := runNATSCluster(t, 3)
	ctx := context.Background()
	cfg := cluster.DeliveryStateConfig{Replicas: 3, Routes: []outbound.Route{{Name: "r"}}}
	a, sta := gatewayState(t, urls[0], "gw-a", cfg)
	b, stb := gatewayState(t, urls[1], "gw-b", cfg)
	ka, kb := adopt(t, sta, "r", "s", "e1"), adopt(t, stb, "r", "s", "e1")
	gatewaytest.WaitFor(t, "a's first claim", 30*time.Second, func() (bool, string) {
		return a.TryClaim(ctx, ka), "refused"
	})
	if _, undo, err := b.Reset(ctx, kb, false); err == nil || !errors.Is(err, outbound.ErrRoundQueued) || undo != nil {
		t.Fatalf("reset under a's lease: %v, want ErrRoundQueued", err)
	}
	if err := a.Record(ctx, delivery(ka, store.StateDead), []store.Attempt{{StartedAt: time.Now(), Status: 500}}); err != nil {
		t.Fatalf("a's outcome after b's refused reset: %v, want it written over a's claim", err)
	}
	a.Release(ka)

	status := func(s *cluster.DeliveryState, k outbound.DeliveryKey) store.DeliveryStatus {
		t.Helper()
		st, err := s.Status(ctx, "r", k.Seq, "s", "e1")
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	_, undo, err := b.Reset(ctx, kb, false)
	if err != nil {
		t.Fatal(err)
	}
	if st := status(a, ka); st.State != store.StatePending || st.Attempts != 1 {
		t.Fatalf("a reads %+v after b's reset, want pending after 1 attempt", st)
	}
	if _, again, err := a.Reset(ctx, ka, false); err != nil || again != nil {
		t.Fatalf("a reset of a pending delivery: %v, wrote %v; want nothing written", err, again != nil)
	}
	undo()
	if st := status(a, ka); st.State != store.StateDead {
		t.Fatalf("a reads %+v after the undo, want dead", st)
	}

	// An operator's round that ran nothing puts back what the reset
	// wrote over at its release.
	if _, _, err = b.Reset(ctx, kb, false); err != nil {
		t.Fatal(err)
	}
	if !b.TryClaim(ctx, kb) {
		t.Fatal("claim after the reset refused")
	}
	b.Unreset(kb, store.StateDead)
	b.Release(kb)
	if st := status(a, ka); st.State != store.StateDead || st.Attempts != 1 {
		t.Fatalf("a reads %+v after b's round that ran nothing, want dead after 1 attempt", st)
	}

	// A reset's undo after the operator's round claimed it writes nothing.
	if _, undo, err = b.Reset(ctx, kb, false); err != nil {
		t.Fatal(err)
	}
	if !b.TryClaim(ctx, kb) {
		t.Fatal("claim after the reset refused")
	}
	undo()
	if err := b.Record(ctx, delivery(kb, store.StateSucceeded), []store.Attempt{{StartedAt: time.Now(), Status: 200}}); err != nil {
		t.Fatalf("the operator's round's outcome after the undo: %v", err)
	}
	b.Release(kb)
	if _, _, err := a.Reset(ctx, ka, false); !errors.Is(err, outbound.ErrSucceeded) {
		t.Fatalf("a retry's reset of a delivery the cluster holds succeeded: %v, want ErrSucceeded", err)
	}
	if _, _, err := a.Reset(ctx, ka, true); err != nil {
		t.Fatalf("a replay's reset of a succeeded delivery: %v", err)
	}
	if st := status(b, kb); st.State != store.StatePending || st.Attempts != 2 {
		t.Fatalf("b reads %+v after a's replay reset, want pending after 2 attempts", st)
	}
}
