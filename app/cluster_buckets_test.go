package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// bucketTTL reads a KV bucket's ttl and replicas through a's connection.
func bucketTTL(t *testing.T, a *App, bucket string) (time.Duration, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := a.Broker().JetStream().KeyValue(ctx, bucket)
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

// A gateway restarted with another cluster.claim_ttl and
// retention.events updates both buckets and logs what changed; one asking
// for more replicas than the NATS cluster has nodes does not start, with
// a config error naming nats.replicas (the gateway exits 2).
func TestClusterBucketsFollowConfig(t *testing.T) {
	nc := gatewaytest.RunNATSCluster(t, 3)
	yaml := func(claimTTL, events string, replicas int) string {
		return fmt.Sprintf(`
nats: {url: %q, replicas: %d, connect_timeout: 5s}
cluster: {enabled: true, claim_ttl: %s}
retention: {events: %s}
routes:
  - {name: billing, sources: [stripe], url: "http://127.0.0.1:1"}
`, nc.URL, replicas, claimTTL, events)
	}
	var log gatewaytest.SyncBuffer
	a := startAppLogged(t, yaml("1h", "800h", 3), &log)
	if ttl, r := bucketTTL(t, a, "HOOKGATE_CLAIMS"); ttl != time.Hour || r != 3 {
		t.Fatalf("claims bucket made with ttl %s, %d replicas; want 1h, 3", ttl, r)
	}
	if ttl, _ := bucketTTL(t, a, "HOOKGATE_DELIVERIES"); ttl != 800*time.Hour {
		t.Fatalf("deliveries bucket made with ttl %s; want 800h", ttl)
	}
	a.Stop(context.Background())

	b := startAppLogged(t, yaml("2h", "900h", 3), &log)
	if ttl, _ := bucketTTL(t, b, "HOOKGATE_CLAIMS"); ttl != 2*time.Hour {
		t.Errorf("claims bucket after a restart with claim_ttl 2h: ttl %s", ttl)
	}
	if ttl, _ := bucketTTL(t, b, "HOOKGATE_DELIVERIES"); ttl != 900*time.Hour {
		t.Errorf("deliveries bucket after a restart with retention.events 900h: ttl %s", ttl)
	}
	for _, want := range []string{"bucket=HOOKGATE_CLAIMS ttl=\"1h0m0s → 2h0m0s\"", "bucket=HOOKGATE_DELIVERIES ttl=\"800h0m0s → 900h0m0s\""} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("no log line with %s in:\n%s", want, log.String())
		}
	}
	b.Stop(context.Background())

	c := New(testConfig(t, yaml("2h", "900h", 5)), slog.New(slog.DiscardHandler))
	err := c.Start(context.Background())
	c.Stop(context.Background())
	var cerr *config.Error
	if !errors.As(err, &cerr) || cerr.Path != "nats.replicas" {
		t.Fatalf("start with 5 replicas on 3 nodes: %v; want a config error naming nats.replicas", err)
	}
	t.Logf("refused: %v", err)
}
