package store

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkRecordRound is the delivery engine's write: 64 concurrent
// rounds, each a new delivery that succeeded at its first attempt (the
// common case), with a short response kept.
func BenchmarkRecordRound(b *testing.B) {
	var commits, writes atomic.Int64
	s := openBenchStore(b, &commits, &writes)
	var n atomic.Int64
	b.SetParallelism(32) // 64 goroutines on 2 CPUs
	b.ReportAllocs()
	c0 := cpuTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			id := fmt.Sprintf("evt_%016x", rand.Uint64()) // random, as real event IDs
			d := &Delivery{Route: "billing", Source: "stripe", EventID: id, EventType: "invoice.paid",
				IdempotencyKey: fmt.Sprintf("hg_%d", i), State: StateSucceeded, LastStatus: 204}
			at := []Attempt{{StartedAt: time.Now(), Duration: time.Millisecond, Status: 204, Response: []byte{}}}
			if err := s.RecordRound(context.Background(), d, at); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op")
	if c := commits.Load(); c > 0 {
		b.ReportMetric(float64(writes.Load())/float64(c), "writes/commit")
	}
}

// BenchmarkDeliveryLookup is the engine's read before each round: 64
// concurrent lookups by (route, source, event_id) among 20,000 deliveries.
func BenchmarkDeliveryLookup(b *testing.B) {
	var commits, writes atomic.Int64
	s := openBenchStore(b, &commits, &writes)
	ctx := context.Background()
	const rows = 20000
	err := s.write(ctx, func(tx *sql.Tx) error {
		for i := 0; i < rows; i++ {
			if _, err := tx.Exec(`INSERT INTO deliveries (route, source, event_id, idempotency_key, state,
				attempts, last_status, created_at, updated_at) VALUES ('billing', 'stripe', ?, 'k', 'succeeded', 1, 204, 1, 1)`,
				fmt.Sprintf("evt_%d", i)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.SetParallelism(32)
	b.ReportAllocs()
	c0 := cpuTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := rand.New(rand.NewPCG(rand.Uint64(), 1))
		for pb.Next() {
			if _, err := s.Delivery(ctx, "billing", "stripe", fmt.Sprintf("evt_%d", r.IntN(rows))); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkRecordRoundWriter is the writer's share of RecordRound alone:
// batches of 64 rounds (new deliveries, one attempt each) committed by
// the writer's own code, without the callers, channels and goroutines.
// cpu-ns/op is the CPU per round, COMMIT's share included (not the fsync
// wait).
func BenchmarkRecordRoundWriter(b *testing.B) {
	var commits, writes atomic.Int64
	s := openBenchStore(b, &commits, &writes)
	const batch = 64
	ops := make([]*op, batch)
	ds := make([]Delivery, batch)
	at := []Attempt{{StartedAt: time.Now(), Duration: time.Millisecond, Status: 204, Response: []byte{}}}
	b.ReportAllocs()
	c0 := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		n := min(batch, b.N-i)
		for j := range n {
			ds[j] = Delivery{Route: "billing", Source: "stripe", EventID: fmt.Sprintf("evt_%016x", rand.Uint64()),
				EventType: "invoice.paid", IdempotencyKey: "hg_k", State: StateSucceeded, LastStatus: 204}
			ops[j] = roundOp(&ds[j], at)
		}
		if err := s.commit(ops[:n]); err != nil {
			b.Fatal(err)
		}
		for j := range n {
			if ops[j].err != nil {
				b.Fatal(ops[j].err)
			}
			putOp(ops[j])
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op")
}

// roundOp is the op RecordRound submits.
func roundOp(d *Delivery, attempts []Attempt) *op {
	o := getOp()
	o.round, o.attempts, o.now = d, attempts, time.Now().UnixMilli()
	return o
}
