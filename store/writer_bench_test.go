package store

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

func openBenchStore(b *testing.B, commits, writes *atomic.Int64) *Store {
	b.Helper()
	return openBenchStoreZeroFill(b, commits, writes, false)
}

// openBenchStoreZeroFill is openBenchStore with Config.WALZeroFill.
func openBenchStoreZeroFill(b *testing.B, commits, writes *atomic.Int64, zeroFill bool) *Store {
	b.Helper()
	s, err := Open(context.Background(), Config{Path: filepath.Join(b.TempDir(), "b.db"), WALZeroFill: zeroFill,
		OnCommit: func(n int) { commits.Add(1); writes.Add(int64(n)) }},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkWriterClaim is the intake's write: 64 concurrent claims of 1 KiB
// events, 10% of them repeats, each answered after its group commit. Its
// WAL grows as it runs, as in a new store's first WAL cycle.
func BenchmarkWriterClaim(b *testing.B) { benchWriterClaim(b, false) }

// BenchmarkWriterClaimZeroFilled is BenchmarkWriterClaim over a WAL filled
// at Open (Config.WALZeroFill): commits overwrite it, as after a cycle.
func BenchmarkWriterClaimZeroFilled(b *testing.B) { benchWriterClaim(b, true) }

func benchWriterClaim(b *testing.B, zeroFill bool) {
	var commits, writes atomic.Int64
	s := openBenchStoreZeroFill(b, &commits, &writes, zeroFill)
	body := make([]byte, 1024)
	headers := []byte(`{"User-Agent":"Stripe/1.0 (+https://stripe.com/docs/webhooks)"}`)
	var n, dups atomic.Int64
	b.SetParallelism(32) // 64 goroutines on 2 CPUs
	b.ReportAllocs()
	c0, w0 := gatewaytest.CPUTime(), gatewaytest.BytesWritten()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := rand.New(rand.NewPCG(uint64(n.Add(1)), 7))
		for pb.Next() {
			i := n.Add(1)
			if r.IntN(10) == 0 && i > 100 {
				i = 1 + r.Int64N(i-1) // a repeat
			}
			ev := &Event{Source: "stripe", ID: "evt_" + fmt.Sprint(i), Type: "invoice.paid",
				ContentType: "application/json", Headers: headers, Body: body, ReceivedAt: time.Now()}
			dup, err := s.Claim(context.Background(), ev)
			if err != nil {
				b.Error(err)
				return
			}
			if dup {
				dups.Add(1)
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(gatewaytest.CPUTime()-c0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(gatewaytest.BytesWritten()-w0)/float64(b.N), "written-B/op")
	reportWrites(b, &commits, &writes)
}

// BenchmarkWriterOp is a generic write (a closure run in its own
// savepoint), as deliveries and tasks record theirs: 64 concurrent
// upserts of small rows.
func BenchmarkWriterOp(b *testing.B) {
	var commits, writes atomic.Int64
	s := openBenchStore(b, &commits, &writes)
	var n atomic.Int64
	b.SetParallelism(32)
	b.ReportAllocs()
	c0 := gatewaytest.CPUTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			k := "k" + fmt.Sprint(n.Add(1)%4096)
			if err := s.SetMeta(context.Background(), k, "value"); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(gatewaytest.CPUTime()-c0)/float64(b.N), "cpu-ns/op")
	reportWrites(b, &commits, &writes)
}

// BenchmarkWriterMarkPublished is the relay's write: events acknowledged
// by JetStream taken out of the outbox, 256 per write as the relay records
// a batch. Claiming the events (and checkpointing them) is not measured.
func BenchmarkWriterMarkPublished(b *testing.B) {
	var commits, writes atomic.Int64
	s := openBenchStore(b, &commits, &writes)
	body := make([]byte, 1024)
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < b.N; i += 16 {
				if _, err := s.Claim(ctx, &Event{Source: "stripe", ID: "evt_" + strconv.Itoa(i), Type: "invoice.paid",
					Body: body, ReceivedAt: time.Now()}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if _, err := s.ckpt.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	c0, w0 := gatewaytest.CPUTime(), gatewaytest.BytesWritten()
	b.ResetTimer()
	// A new database numbers the events 1 to b.N.
	acks := make([]Published, 0, 256)
	for seq := int64(1); seq <= int64(b.N); seq++ {
		acks = append(acks, Published{Seq: seq, StreamSeq: seq})
		if len(acks) == cap(acks) || seq == int64(b.N) {
			if err := s.MarkPublished(ctx, acks, time.Now()); err != nil {
				b.Fatal(err)
			}
			acks = acks[:0]
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(gatewaytest.CPUTime()-c0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(gatewaytest.BytesWritten()-w0)/float64(b.N), "written-B/op")
	if n, err := s.OutboxBacklog(ctx); err != nil || n != 0 {
		b.Fatalf("outbox holds %d events after marking all, %v", n, err)
	}
}

// reportWrites reports the writes per group commit counted by OnCommit.
func reportWrites(b *testing.B, commits, writes *atomic.Int64) {
	if c := commits.Load(); c > 0 {
		b.ReportMetric(float64(writes.Load())/float64(c), "writes/commit")
	}
}
