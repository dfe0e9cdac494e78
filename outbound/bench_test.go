package outbound_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// BenchmarkDelivery measures end-to-end delivery to a fast local
// downstream: b.N events taken in over HTTP (route concurrency 64), timed
// until the downstream has answered every one; events/s is the figure.
func BenchmarkDelivery(b *testing.B) {
	var got atomic.Int64
	ds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		w.WriteHeader(204)
	}))
	defer ds.Close()
	g := startGatewayB(b, fmt.Sprintf(`
listen: "127.0.0.1:0"
data_dir: %q
log: {level: error}
sources: [{name: open, verify: none, id_field: id}]
routes: [{name: fast, sources: [open], url: %q, concurrency: 64}]
`, b.TempDir(), ds.URL))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	url := "http://" + g.Addr() + "/webhooks/open"
	b.ResetTimer()
	c0 := gatewaytest.CPUTime()
	start := time.Now()
	var wg sync.WaitGroup
	var next atomic.Int64
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := next.Add(1)
				if n > int64(b.N) {
					return
				}
				resp, err := client.Post(url, "application/json", bytes.NewReader([]byte(fmt.Sprintf(`{"id":"e%d","pad":"%0900d"}`, n, 0))))
				if err != nil {
					b.Error(err)
					return
				}
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	for got.Load() < int64(b.N) {
		time.Sleep(time.Millisecond)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
	b.ReportMetric(float64(gatewaytest.CPUTime()-c0)/float64(b.N), "cpu-ns/op")
}
