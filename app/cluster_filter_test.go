package app

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/store"
)

// In cluster mode a route's filter is recorded through the cluster's
// DeliveryState: an event it rejects is filtered once, by whichever
// gateway took the message, acked, and never sent; other routes get it.
func TestClusterRouteFilter(t *testing.T) {
	nc := gatewaytest.RunNATSCluster(t, 3)
	keys, downstream := newKeyCounter(t)
	var gws []*App
	for range 2 {
		cfg := testConfig(t, fmt.Sprintf(`
nats: {url: %q, replicas: 3, duplicate_window: 1s, connect_timeout: 5s}
cluster: {enabled: true, claim_timeout: 10s}
routes:
  - {name: live, sources: [stripe], url: %q, filter: 'body.id.endsWith("_live")'}
  - {name: all, sources: [stripe], url: %q}
`, nc.URL, downstream.URL, downstream.URL))
		gws = append(gws, startApp(t, cfg))
	}
	const events = 10
	for e := range events {
		id := fmt.Sprintf("evt_%d_test", e)
		if e%2 == 0 {
			id = fmt.Sprintf("evt_%d_live", e)
		}
		if code, body := postStripe(t, gws[e%len(gws)], id); code != 200 {
			t.Fatalf("%s: %d %s", id, code, body)
		}
	}
	waitDrained(t, gws)
	gatewaytest.WaitFor(t, "every event delivered", 30*time.Second, func() (bool, string) {
		n, _ := keys.counts()
		return n == events+events/2, fmt.Sprintf("%d of %d deliveries", n, events+events/2)
	})
	keys.mu.Lock()
	seen := maps.Clone(keys.seen)
	keys.mu.Unlock()
	for e := range events {
		live := e%2 == 0
		id := fmt.Sprintf("evt_%d_test", e)
		if live {
			id = fmt.Sprintf("evt_%d_live", e)
		}
		if n := seen[outbound.IdempotencyKey("live", "stripe", id)]; live && n != 1 || !live && n != 0 {
			t.Errorf("%s sent %d times to route live", id, n)
		}
		if n := seen[outbound.IdempotencyKey("all", "stripe", id)]; n != 1 {
			t.Errorf("%s sent %d times to route all", id, n)
		}
		if live {
			continue
		}
		filtered := 0
		for _, a := range gws {
			d, err := a.Store().Delivery(context.Background(), "live", "stripe", id)
			switch {
			case err == nil && d.State == store.StateFiltered:
				filtered++
			case err == nil:
				t.Errorf("%s on route live: %+v", id, d)
			}
		}
		if filtered == 0 {
			t.Errorf("%s: no gateway recorded it filtered", id)
		}
	}
}
