package cluster

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/store"
)

// connect returns a JetStream handle on url, closed when the test ends.
func connect(t testing.TB, url string) natsjs.JetStream {
	t.Helper()
	_, js := gatewaytest.ConnectJetStream(t, url)
	return js
}

func newClaims(t testing.TB, js natsjs.JetStream, gateway string, ttl time.Duration, replicas int) *Claims {
	t.Helper()
	c, err := New(Config{Gateway: gateway, TTL: ttl, Replicas: replicas,
		JetStream: func() natsjs.JetStream { return js }})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Keys are valid KV keys, one per (source, id), and do not merge a source
// into an ID.
func TestKey(t *testing.T) {
	valid := regexp.MustCompile(`^[-/_=.a-zA-Z0-9]+$`)
	seen := map[string]string{}
	for _, p := range [][2]string{{"stripe", "evt_1"}, {"stripe", "evt_2"}, {"stripee", "vt_1"},
		{"a", "b\x00c"}, {"a\x00b", "c"}, {"s", "ünïcødé ✓ with spaces/and.dots"}} {
		k := Key(p[0], p[1])
		if !valid.MatchString(k) || len(k) != 22 {
			t.Errorf("Key(%q, %q) = %q: not a 22-character KV key", p[0], p[1], k)
		}
		if o, ok := seen[k]; ok {
			t.Errorf("Key(%q, %q) = Key of %s", p[0], p[1], o)
		}
		seen[k] = fmt.Sprintf("%q", p)
	}
}

// The first gateway to claim an event holds it: another gateway's claim
// names the holder, the holder's own claim (again, or after a restart,
// with nothing remembered) is its own; once the TTL passes, the event may
// be claimed anew.
func TestClaimHeldByFirst(t *testing.T) {
	srv := gatewaytest.RunNATS(t, 0, t.TempDir())
	js := connect(t, srv.ClientURL())
	ctx := context.Background()
	a := newClaims(t, js, "gw-a", 2*time.Second, 1)
	b := newClaims(t, js, "gw-b", 2*time.Second, 1)
	ev := &store.Event{Source: "stripe", ID: "evt_1", Seq: 7}

	if h, err := a.ClaimAtIntake(ctx, ev); err != nil || h != "" {
		t.Fatalf("a's first claim: holder %q, %v; want a's", h, err)
	}
	if h, err := b.ClaimAtIntake(ctx, ev); err != nil || h != "gw-a" {
		t.Fatalf("b's claim: holder %q, %v; want gw-a", h, err)
	}
	if h, err := b.ClaimToPublish(ctx, ev); err != nil || h != "gw-a" {
		t.Fatalf("b's claim before publishing: holder %q, %v; want gw-a", h, err)
	}
	a2 := newClaims(t, js, "gw-a", 2*time.Second, 1) // a restarted: nothing remembered
	if h, err := a2.ClaimToPublish(ctx, ev); err != nil || h != "" {
		t.Fatalf("a's claim after a restart: holder %q, %v; want a's", h, err)
	}
	gatewaytest.WaitFor(t, "the claim to expire and b to take it", 20*time.Second, func() (bool, string) {
		h, err := b.ClaimToPublish(ctx, ev)
		return err == nil && h == "", fmt.Sprintf("holder %q, %v", h, err)
	})
}

// Without NATS, a claim at intake fails at once when Connected says so,
// and every claim fails (nothing is known) rather than answering.
func TestClaimWithoutNATS(t *testing.T) {
	srv := gatewaytest.RunNATS(t, 0, t.TempDir())
	js := connect(t, srv.ClientURL())
	c, err := New(Config{Gateway: "gw-a", TTL: time.Minute, JetStream: func() natsjs.JetStream { return js },
		Connected: func() bool { return false }})
	if err != nil {
		t.Fatal(err)
	}
	ev := &store.Event{Source: "stripe", ID: "evt_1"}
	if _, err := c.ClaimAtIntake(context.Background(), ev); err == nil {
		t.Fatal("a claim at intake while not connected succeeded")
	}
	srv.Shutdown()
	srv.WaitForShutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if h, err := c.ClaimToPublish(ctx, ev); err == nil {
		t.Fatalf("a claim without NATS answered holder %q", h)
	}
}

// A bucket deleted while the gateway runs (a wiped NATS store) is created
// again by the next claims, not failed on forever.
func TestBucketCreatedAgain(t *testing.T) {
	srv := gatewaytest.RunNATS(t, 0, t.TempDir())
	js := connect(t, srv.ClientURL())
	ctx := context.Background()
	c := newClaims(t, js, "gw-a", time.Hour, 1)
	if h, err := c.ClaimToPublish(ctx, &store.Event{Source: "s", ID: "evt_1"}); err != nil || h != "" {
		t.Fatalf("first claim: %q, %v", h, err)
	}
	if err := js.DeleteKeyValue(ctx, "HOOKGATE_CLAIMS"); err != nil {
		t.Fatal(err)
	}
	gatewaytest.WaitFor(t, "a claim in the bucket created again", 10*time.Second, func() (bool, string) {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		h, err := c.ClaimToPublish(cctx, &store.Event{Source: "s", ID: "evt_2"})
		return err == nil && h == "", fmt.Sprintf("holder %q, %v", h, err)
	})
}
