package relay

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/cluster"
	"github.com/hookgate/hookgate/jetstream"
	"github.com/hookgate/hookgate/store"
)

// With a ClaimingPublisher, an event another gateway holds is recorded as
// claimed elsewhere and never published; the events around it are
// published, once each, with no failed round (no backoff).
func TestClaimingPublisherSkipsHeldElsewhere(t *testing.T) {
	srv := runServer(t, 0, t.TempDir())
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{Path: filepath.Join(t.TempDir(), "db")}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b, err := jetstream.Connect(ctx, jetstream.Config{URL: srv.ClientURL(), Retention: "limits"}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	claims := func(gateway string) *cluster.Claims {
		c, err := cluster.New(cluster.Config{Gateway: gateway, TTL: time.Hour,
			JetStream: func() natsjs.JetStream { return b.JetStream() }})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	other := claims("gw-other")
	if mine, _, err := other.Claim(ctx, "stripe", "evt_2", 1); err != nil || !mine {
		t.Fatalf("the other gateway's claim: mine=%v %v", mine, err)
	}
	for _, id := range []string{"evt_1", "evt_2", "evt_3"} {
		claim(t, st, "stripe", id)
	}
	pub := &ClaimingPublisher{Claims: claims("gw-me"), Next: b, Store: st, Log: quietLog()}
	var failed atomic.Int64
	r := New(st, b, Config{Poll: 50 * time.Millisecond, Publisher: pub,
		OnError: func(error) { failed.Add(1) }}, quietLog())
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer r.Stop(ctx)
	waitFor(t, "the outbox drained", 10*time.Second, func() (bool, string) {
		_, ok, err := st.OutboxOldest(ctx)
		return !ok && err == nil, fmt.Sprintf("outbox not empty (%v)", err)
	})
	if n := streamMsgs(t, b); n != 2 {
		t.Fatalf("%d messages in the stream, want 2 (evt_1, evt_3)", n)
	}
	if n := failed.Load(); n != 0 {
		t.Errorf("%d failed rounds, want 0", n)
	}
	if h, err := st.HolderElsewhere(ctx, 2); err != nil || h != "gw-other" {
		t.Fatalf("evt_2's holder = %q, %v; want gw-other", h, err)
	}
}
