package cluster_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/cluster"
	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/store"
)

// The records stream deleted while the gateways follow it, none with a
// round of its own to publish, is made again (logged); its check fails
// while it is gone, naming it. Without this the ordered consumers went on
// waiting on the deleted stream without a word, and the records of the
// events a gateway took failed to publish, until a round's record
// happened to make the stream again.
func TestRecordsStreamGoneMadeAgain(t *testing.T) {
	srv := gatewaytest.RunNATS(t, 0, t.TempDir())
	ctx := context.Background()
	conn, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	js, _ := natsjs.New(conn)
	cfg := cluster.RecordsConfig{TTL: time.Hour, Poll: 50 * time.Millisecond,
		JetStream: func() natsjs.JetStream { return js }}
	var log gatewaytest.SyncBuffer // both gateways'
	start := func(name string) (*store.Store, *cluster.Records) {
		st := openStore(t)
		cfg.Gateway = name
		r, err := cluster.NewRecords(st, cfg, slog.New(slog.NewTextHandler(&log, nil)).With("gateway", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Stop(context.Background()) })
		return st, r
	}
	sta, ra := start("a")
	stb, rb := start("b")
	publishRound(t, sta, ra, "e0", 1)
	gatewaytest.WaitFor(t, "b follows the stream (applied e0)", 30*time.Second, func() (bool, string) {
		ds, err := stb.ListDeliveries(ctx, store.DeliveryFilter{EventID: "e0"})
		return len(ds) == 1, fmt.Sprint(len(ds), err)
	})
	if err := rb.Check(ctx); err != nil {
		t.Fatalf("check: %v", err)
	}

	if err := js.DeleteStream(ctx, cluster.DefaultRecordsStream); err != nil {
		t.Fatal(err)
	}
	if err := rb.Check(ctx); err == nil || !strings.Contains(err.Error(), cluster.DefaultRecordsStream) {
		t.Errorf("check without the stream: %v; want an error naming it", err)
	}
	// The check passes once the stream is there, a moment before the
	// gateway that made it logs it.
	gatewaytest.WaitFor(t, "the stream made again, and logged", 30*time.Second, func() (bool, string) {
		err := rb.Check(ctx)
		n := strings.Count(log.String(), "cluster records: stream created")
		return err == nil && n >= 2, fmt.Sprintf("check: %v; the making logged %d times (want at the start and again):\n%s", err, n, log.String())
	})
}
