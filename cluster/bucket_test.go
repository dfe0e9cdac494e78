package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/cluster"
	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/store"
)

// bucketConfig reads a KV bucket's ttl and replicas from the server.
func bucketConfig(t *testing.T, js natsjs.JetStream, bucket string) (time.Duration, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.(*natsjs.KeyValueBucketStatus).StreamInfo().Config
	return cfg.MaxAge, cfg.Replicas
}

// A gateway started with another cluster.claim_ttl, delivery TTL or
// nats.replicas updates the buckets made by an earlier start; what
// JetStream refuses (more replicas than nodes) is a *RefusedError
// naming the change, and the bucket is used as it is.
func TestBucketsFollowConfig(t *testing.T) {
	nc := gatewaytest.RunNATSCluster(t, 3)
	js := connectJS(t, nc.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	claims := func(ttl time.Duration, replicas int) *cluster.Claims {
		c, err := cluster.New(cluster.Config{Gateway: "gw1", TTL: ttl, Replicas: replicas,
			JetStream: func() natsjs.JetStream { return js }, Log: testLog()})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	states := func(ttl time.Duration, replicas int) *cluster.DeliveryState {
		return cluster.NewDeliveryState(func() natsjs.JetStream { return js }, nil,
			cluster.DeliveryStateConfig{TTL: ttl, Replicas: replicas, Wait: 10 * time.Second}, testLog())
	}
	ensure := func(what string, e interface{ Ensure(context.Context) error }) {
		t.Helper()
		gatewaytest.WaitFor(t, what, 30*time.Second, func() (bool, string) {
			err := e.Ensure(ctx)
			return err == nil, fmt.Sprint(err)
		})
	}
	ensure("claims bucket, 1h", claims(time.Hour, 1))
	ensure("deliveries bucket, 800h", states(800*time.Hour, 1))
	if ttl, r := bucketConfig(t, js, "HOOKGATE_CLAIMS"); ttl != time.Hour || r != 1 {
		t.Fatalf("claims bucket made with ttl %s, %d replicas; want 1h, 1", ttl, r)
	}

	// Restarted with other values.
	ensure("claims bucket, 2h, 3 replicas", claims(2*time.Hour, 3))
	ensure("deliveries bucket, 900h, 3 replicas", states(900*time.Hour, 3))
	if ttl, r := bucketConfig(t, js, "HOOKGATE_CLAIMS"); ttl != 2*time.Hour || r != 3 {
		t.Errorf("claims bucket: ttl %s, %d replicas; want 2h, 3", ttl, r)
	}
	// The first claim after its peers changed is answered.
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	holder, err := claims(2*time.Hour, 3).ClaimAtIntake(cctx, &store.Event{Source: "stripe", ID: "evt_after_scale", Seq: 1})
	ccancel()
	if err != nil || holder != "" {
		t.Fatalf("first claim after the change of replicas: holder %q, %v", holder, err)
	}
	if ttl, r := bucketConfig(t, js, "HOOKGATE_DELIVERIES"); ttl != 900*time.Hour || r != 3 {
		t.Errorf("deliveries bucket: ttl %s, %d replicas; want 900h, 3", ttl, r)
	}

	// More replicas than the cluster has nodes: refused, named, usable.
	c := claims(2*time.Hour, 5)
	err = c.Ensure(ctx)
	var refused *cluster.RefusedError
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "replicas 3 → 5") {
		t.Fatalf("5 replicas on 3 nodes: %v; want a *RefusedError naming replicas 3 → 5", err)
	}
	ev := &store.Event{Source: "stripe", ID: "evt_refused", Seq: 1}
	if holder, err := c.ClaimAtIntake(ctx, ev); err != nil || holder != "" {
		t.Fatalf("claim in the bucket used as it is: holder %q, %v", holder, err)
	}
	if ttl, r := bucketConfig(t, js, "HOOKGATE_CLAIMS"); ttl != 2*time.Hour || r != 3 {
		t.Errorf("claims bucket after the refusal: ttl %s, %d replicas; want 2h, 3", ttl, r)
	}
}
