package outbound

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// BenchmarkSend is a round's requests alone (build, send, read the
// answer, the attempt recorded) to a local downstream answering 204:
// 32 rounds at a time, one attempt each.
func BenchmarkSend(b *testing.B) {
	ds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer ds.Close()
	e, err := New([]Route{{Name: "billing", Sources: []string{"stripe"}, URL: ds.URL + "/hooks", Concurrency: 64, Retries: 3}},
		nil, nil, Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	r := e.byName["billing"]
	body := make([]byte, 1024)
	var failed atomic.Int64
	b.SetParallelism(16) // 32 goroutines on 2 CPUs
	b.ReportAllocs()
	c0 := gatewaytest.CPUTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var seq int64
		for pb.Next() {
			seq++
			ev := envelope{seq: seq, source: "stripe", id: "evt_1", typ: "invoice.paid", contentType: "application/json", body: body}
			res, _ := e.send(context.Background(), r, ev, IdempotencyKey("billing", "stripe", "evt_1"), 0)
			if res.last.Status != http.StatusNoContent {
				failed.Add(1)
			}
		}
	})
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d rounds did not get a 204", n)
	}
	b.ReportMetric(float64(gatewaytest.CPUTime()-c0)/float64(b.N), "cpu-ns/op")
}

// TestRequestAllocations: a round's request is built with one value array
// for the headers the gateway sets and a map sized for them (Header.Set
// made a slice per value, and the map grew twice).
func TestRequestAllocations(t *testing.T) {
	for _, c := range []struct {
		name   string
		secret string
		max    float64
	}{
		{"unsigned", "", 11},
		{"signed", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", 25},
	} {
		e, err := New([]Route{{Name: "billing", Sources: []string{"stripe"}, URL: "http://127.0.0.1:1/hooks", Secret: c.secret}},
			nil, nil, Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		r := e.byName["billing"]
		ev := envelope{seq: 1, source: "stripe", id: "evt_1", typ: "invoice.paid", contentType: "application/json", body: []byte(`{}`)}
		key := IdempotencyKey("billing", "stripe", "evt_1")
		st := &roundState{r: r, key: key, body: ev.body}
		ctx := context.WithValue(context.Background(), ctxKey{}, st)
		allocs := testing.AllocsPerRun(100, func() {
			req, err := e.request(ctx, r, ev, key)
			if err != nil {
				t.Fatal(err)
			}
			e.beforeAttempt(nil, req.Request, 0)
		})
		if allocs > c.max {
			t.Errorf("%s: %.0f allocations to build a request, want at most %.0f", c.name, allocs, c.max)
		} else {
			t.Logf("%s: %.0f allocations", c.name, allocs)
		}
	}
}
