package relay

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/jetstream"
	"github.com/hookgate/hookgate/store"
)

// memOutbox is an outbox in memory: it isolates the publisher from SQLite.
type memOutbox struct {
	mu        sync.Mutex
	evs       []store.Event // Seq i+1 at index i
	published []bool
	left      int
	low       int // every event before it is published
	done      chan struct{}
}

func newMemOutbox(n int) *memOutbox {
	o := &memOutbox{evs: make([]store.Event, n), published: make([]bool, n), left: n, done: make(chan struct{})}
	body := make([]byte, 1024)
	now := time.Now()
	for i := range o.evs {
		o.evs[i] = store.Event{Seq: int64(i + 1), Source: "stripe", ID: fmt.Sprintf("evt_%d", i),
			Type: "invoice.paid", ContentType: "application/json", Body: body, ReceivedAt: now}
	}
	return o
}

func (o *memOutbox) Unpublished(_ context.Context, after int64, limit int) ([]store.Event, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []store.Event
	start := max(o.low, sort.Search(len(o.evs), func(i int) bool { return o.evs[i].Seq > after }))
	for i := start; i < len(o.evs) && len(out) < limit; i++ {
		if !o.published[i] {
			out = append(out, o.evs[i])
		}
	}
	return out, nil
}

func (o *memOutbox) MarkPublished(_ context.Context, acks []store.Published, _ time.Time) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, a := range acks {
		if i := a.Seq - 1; !o.published[i] {
			o.published[i] = true
			o.left--
		}
	}
	for o.low < len(o.published) && o.published[o.low] {
		o.low++
	}
	if o.left == 0 {
		close(o.done)
	}
	return nil
}

// countingOutbox is the store's outbox, closing done once n events were
// marked published.
type countingOutbox struct {
	*store.Store
	mu   sync.Mutex
	seen map[int64]bool
	n    int
	done chan struct{}
}

func (o *countingOutbox) MarkPublished(ctx context.Context, acks []store.Published, at time.Time) error {
	if err := o.Store.MarkPublished(ctx, acks, at); err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, a := range acks {
		o.seen[a.Seq] = true
	}
	if len(o.seen) == o.n && o.done != nil {
		close(o.done)
		o.done = nil
	}
	return nil
}

// BenchmarkRelayPublish publishes b.N 1 KiB events from an outbox in memory
// to the embedded JetStream server, each acknowledged and marked.
func BenchmarkRelayPublish(b *testing.B) {
	benchRelay(b, func(b *testing.B, n int) (Outbox, <-chan struct{}) {
		o := newMemOutbox(n)
		return o, o.done
	})
}

// BenchmarkRelayPublishStore is the same from the SQLite outbox, where
// each acknowledged batch is marked in a durable group commit.
func BenchmarkRelayPublishStore(b *testing.B) {
	benchRelay(b, func(b *testing.B, n int) (Outbox, <-chan struct{}) {
		st, err := store.Open(context.Background(), store.Config{Path: filepath.Join(b.TempDir(), "db")}, quietLog())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		body := make([]byte, 1024)
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += 16 {
					if _, err := st.Claim(context.Background(), &store.Event{Source: "stripe", ID: fmt.Sprintf("evt_%d", i),
						Type: "invoice.paid", Body: body, ReceivedAt: time.Now()}); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		done := make(chan struct{})
		return &countingOutbox{Store: st, seen: map[int64]bool{}, n: n, done: done}, done
	})
}

func benchRelay(b *testing.B, outbox func(b *testing.B, n int) (Outbox, <-chan struct{})) {
	br, err := jetstream.Connect(context.Background(), jetstream.Config{StoreDir: b.TempDir()}, quietLog())
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	o, done := outbox(b, b.N)
	r := New(o, br, Config{}, quietLog())
	b.SetBytes(1024)
	b.ReportAllocs()
	c0, w0 := gatewaytest.CPUTime(), gatewaytest.BytesWritten()
	b.ResetTimer()
	if err := r.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	r.Notify()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatal("not all published")
	}
	b.StopTimer()
	_ = r.Stop(context.Background())
	b.ReportMetric(float64(gatewaytest.CPUTime()-c0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(gatewaytest.BytesWritten()-w0)/float64(b.N), "written-B/op")
}

func (o *memOutbox) Park(context.Context, int64, string, time.Time) error {
	return errors.New("memOutbox: the broker refused an event")
}
