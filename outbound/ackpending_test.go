package outbound_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/store"
)

// More than 10,000 deliveries of a route waiting for their next round
// (each message nak'd for an hour, pending an ack all the while) do not
// stop the route: a new event is delivered at once. (With the consumer's
// MaxAckPending at 10,000, JetStream gave the route no new message until
// some of them ended: days, on the default schedule.)
func TestRetryingDeliveriesDoNotStallRoute(t *testing.T) {
	var failed atomic.Int32
	ds := newDownstream(t, func(w http.ResponseWriter, r *http.Request, n int) int {
		if r.Header.Get("X-Hookgate-Event-Type") == "bad" {
			failed.Add(1)
			w.WriteHeader(422)
			return 422
		}
		w.WriteHeader(200)
		return 200
	})
	g := startGateway(t, baseConfig(t, routeYAML("r", ds.URL,
		", sources: [other], retries: 0, concurrency: 64, breaker_threshold: 0, schedule: [1h, 1h]")))
	const n = 10001
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 16 {
		wg.Go(func() {
			for i := next.Add(1); i <= n; i = next.Add(1) {
				resp, err := http.Post("http://"+g.Addr()+"/webhooks/other", "application/json",
					bytes.NewReader(fmt.Appendf(nil, `{"id":"bad_%d","type":"bad"}`, i)))
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("intake answered %d", resp.StatusCode)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	gatewaytest.WaitFor(t, "every failing round run", 5*time.Minute, func() (bool, string) {
		return failed.Load() >= n, fmt.Sprintf("%d of %d", failed.Load(), n)
	})
	g.post(t, "other", []byte(`{"id":"good_1","type":"good"}`), nil)
	waitFor(t, "a new event delivered beside 10,001 waiting to retry", func() (bool, string) {
		if d := g.delivery(t, "r", "other", "good_1"); d != nil && d.State == store.StateSucceeded {
			return true, ""
		}
		c, err := g.Broker().JetStream().Consumer(context.Background(), g.Broker().Stream(), "route_r")
		if err != nil {
			return false, err.Error()
		}
		ci, err := c.Info(context.Background())
		if err != nil {
			return false, err.Error()
		}
		return false, fmt.Sprintf("ack pending %d, not yet delivered %d", ci.NumAckPending, ci.NumPending)
	})
}
