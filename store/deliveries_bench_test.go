package store

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mattn/go-sqlite3"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// BenchmarkRecordRound is the delivery engine's write: 64 concurrent
// rounds, each a new delivery that succeeded at its first attempt (the
// common case), with a short response kept. Events come in intake order
// (their seqs ascend), their provider IDs are random.
func BenchmarkRecordRound(b *testing.B) {
	var commits, writes atomic.Int64
	s := openBenchStore(b, &commits, &writes)
	var n atomic.Int64
	b.SetParallelism(32) // 64 goroutines on 2 CPUs
	b.ReportAllocs()
	c0 := gatewaytest.CPUTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			id := fmt.Sprintf("evt_%016x", rand.Uint64()) // random, as real event IDs
			d := &Delivery{EventSeq: i, Route: "billing", Source: "stripe", EventID: id, EventType: "invoice.paid",
				IdempotencyKey: fmt.Sprintf("hg_%d", i), State: StateSucceeded, LastStatus: 204}
			at := []Attempt{{StartedAt: time.Now(), Duration: time.Millisecond, Status: 204, Response: []byte{}}}
			if err := s.RecordRound(context.Background(), d, at); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(gatewaytest.CPUTime()-c0)/float64(b.N), "cpu-ns/op")
	reportWrites(b, &commits, &writes)
}

// BenchmarkDeliveryLookup is the engine's read before each round: 64
// concurrent lookups among 20,000 deliveries (Delivery by the event's
// source and ID, the others by its seq), with a cancellable context as the engine's (its rounds').
// Delivery reads the whole row through database/sql; DeliveryStatus what
// a round needs, asked of the writer (lookup.go: no writes compete here,
// so this is its hand-off cost more than SQLite's); driver is the same
// statements (writerLookup) on a read connection driven by the benchmark
// itself (2 goroutines), the floor to compare with.
func BenchmarkDeliveryLookup(b *testing.B) {
	var commits, writes atomic.Int64
	s := openBenchStore(b, &commits, &writes)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const rows = 20000
	err := s.write(ctx, func(tx *sql.Tx) error {
		for i := 0; i < rows; i++ {
			id := fmt.Sprintf("evt_%d", i)
			if _, err := tx.Exec(`INSERT INTO events (seq, source, event_id, body, received_at)
				VALUES (?, 'stripe', ?, x'', 1)`, i+1, id); err != nil {
				return err
			}
			if _, err := tx.Exec(`INSERT INTO deliveries (event_seq, route, source, event_id, idempotency_key, state,
				attempts, last_status, created_at, updated_at) VALUES (?, 'billing', 'stripe', ?, 'k', 'succeeded', 1, 204, 1, 1)`,
				i+1, id); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, rows)
	for i := range ids {
		ids[i] = fmt.Sprintf("evt_%d", i)
	}
	run := func(b *testing.B, parallelism int, body func(pb *testing.PB, r *rand.Rand)) {
		b.SetParallelism(parallelism)
		b.ReportAllocs()
		c0 := gatewaytest.CPUTime()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) { body(pb, rand.New(rand.NewPCG(rand.Uint64(), 1))) })
		b.StopTimer()
		b.ReportMetric(float64(gatewaytest.CPUTime()-c0)/float64(b.N), "cpu-ns/op")
	}
	b.Run("Delivery", func(b *testing.B) {
		run(b, 32, func(pb *testing.PB, r *rand.Rand) {
			for pb.Next() {
				if _, err := s.Delivery(ctx, "billing", "stripe", ids[r.IntN(rows)]); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("DeliveryStatus", func(b *testing.B) {
		run(b, 32, func(pb *testing.PB, r *rand.Rand) {
			for pb.Next() {
				i := r.IntN(rows)
				if _, err := s.DeliveryStatus(ctx, "billing", int64(i+1), "stripe", ids[i]); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("driver", func(b *testing.B) {
		run(b, 2, func(pb *testing.PB, r *rand.Rand) {
			conn, err := s.r.Conn(ctx)
			if err != nil {
				b.Error(err)
				return
			}
			defer conn.Close()
			err = conn.Raw(func(dc any) error {
				var wl writerLookup
				if err := wl.prepare(dc.(*sqlite3.SQLiteConn)); err != nil {
					return err
				}
				defer wl.close()
				for pb.Next() {
					i := r.IntN(rows)
					_, found, _, err := wl.status("billing", int64(i+1), "stripe", ids[i])
					if err != nil {
						return fmt.Errorf("status of seq %d: %w", i+1, err)
					}
					if !found {
						return fmt.Errorf("status of seq %d: not found", i+1)
					}
				}
				return nil
			})
			if err != nil {
				b.Error(err)
			}
		})
	})
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
	c0 := gatewaytest.CPUTime()
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		n := min(batch, b.N-i)
		for j := range n {
			ds[j] = Delivery{EventSeq: int64(i + j + 1), Route: "billing", Source: "stripe", EventID: fmt.Sprintf("evt_%016x", rand.Uint64()),
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
	b.ReportMetric(float64(gatewaytest.CPUTime()-c0)/float64(b.N), "cpu-ns/op")
}

// roundOp is the op RecordRound submits.
func roundOp(d *Delivery, attempts []Attempt) *op {
	o := getOp()
	o.round, o.attempts, o.now = d, attempts, time.Now().UnixMilli()
	return o
}

// BenchmarkRecordClusterRound is BenchmarkRecordRound in cluster mode:
// the round with the cluster's attempt numbers and its record for the
// other gateways (records_out), in one transaction.
func BenchmarkRecordClusterRound(b *testing.B) {
	var commits, writes atomic.Int64
	s := openBenchStore(b, &commits, &writes)
	var n atomic.Int64
	b.SetParallelism(32) // 64 goroutines on 2 CPUs
	b.ReportAllocs()
	c0 := gatewaytest.CPUTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			id := fmt.Sprintf("evt_%016x", rand.Uint64()) // random, as real event IDs
			d := &Delivery{EventSeq: i, Route: "billing", Source: "stripe", EventID: id, EventType: "invoice.paid",
				IdempotencyKey: fmt.Sprintf("hg_%d", i), State: StateSucceeded, LastStatus: 204}
			at := []Attempt{{StartedAt: time.Now(), Duration: time.Millisecond, Status: 204, Response: []byte{}}}
			c := ClusterRound{Origin: "gw1", FirstAttempt: 1, Attempts: 1, Version: uint64(i)}
			if err := s.RecordClusterRound(context.Background(), d, at, c); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(gatewaytest.CPUTime()-c0)/float64(b.N), "cpu-ns/op")
	reportWrites(b, &commits, &writes)
}
