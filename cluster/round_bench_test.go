package cluster_test

import (
	"context"
	"errors"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/cluster"
	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/store"
)

// noStore stands in for the local store, so that a benchmark measures the
// bucket's part of a round alone (the store's part: store's benchmarks).
type noStore struct{}

func (noStore) DeliveryStatus(context.Context, string, int64, string, string) (store.DeliveryStatus, error) {
	return store.DeliveryStatus{}, store.ErrNotFound
}

func (noStore) RecordRound(context.Context, *store.Delivery, []store.Attempt) error { return nil }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The delivery state's work for one delivered event, against one
// in-process JetStream server (R1; its CPU counts in cpu-µs/op): the
// claim, the status read, the outcome and the release, as a message's
// first delivery runs them now (fresh), as one read first (a redelivery,
// and every delivery before), and as an event another gateway accepted
// went before (claimed, released, claimed again after the adoption).
func BenchmarkDeliveryStateRound(b *testing.B) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: b.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		b.Fatal(err)
	}
	srv.Start()
	b.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		b.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	run := 0
	for _, c := range []struct {
		name           string
		fresh, adopted bool
	}{{"fresh", true, false}, {"read-first", false, false}, {"adopted-before", false, true}} {
		b.Run(c.name, func(b *testing.B) {
			ds := cluster.NewDeliveryState(func() natsjs.JetStream { return js }, noStore{},
				cluster.DeliveryStateConfig{Bucket: "BENCH_" + c.name[:4], Owner: "gw"}, discard())
			if err := ds.Ensure(ctx); err != nil {
				b.Fatal(err)
			}
			run++ // fresh event IDs in each run
			b.ReportAllocs()
			cpu0 := cpuTime()
			b.ResetTimer()
			for i := range b.N {
				k := outbound.DeliveryKey{Route: "r", Seq: int64(i + 1), Source: "s", EventID: "e" + strconv.Itoa(run) + "-" + strconv.Itoa(i), Fresh: c.fresh}
				if !ds.TryClaim(ctx, k) {
					b.Fatal("no claim")
				}
				if c.adopted {
					ds.Release(k)
					if !ds.TryClaim(ctx, k) {
						b.Fatal("no claim again")
					}
				}
				if _, err := ds.Status(ctx, "r", k.Seq, k.Source, k.EventID); err != nil && !errors.Is(err, store.ErrNotFound) {
					b.Fatal(err)
				}
				d := &store.Delivery{EventSeq: k.Seq, Route: "r", Source: "s", EventID: k.EventID, State: store.StateSucceeded,
					Rounds: 1, LastStatus: 200}
				if err := ds.Record(ctx, d, []store.Attempt{{Attempt: 1, Status: 200}}); err != nil {
					b.Fatal(err)
				}
				ds.Release(k)
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}
