package app

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// keyCounter is a downstream counting the requests per Idempotency-Key.
type keyCounter struct {
	mu   sync.Mutex
	seen map[string]int
}

func newKeyCounter(t *testing.T) (*keyCounter, *httptest.Server) {
	k := &keyCounter{seen: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k.mu.Lock()
		k.seen[r.Header.Get("Idempotency-Key")]++
		k.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return k, srv
}

// counts returns the keys seen and those seen more than once.
func (k *keyCounter) counts() (keys, doubled int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, n := range k.seen {
		if n > 1 {
			doubled++
		}
	}
	return len(k.seen), doubled
}

// startClusterGateways starts n gateways in cluster mode on the NATS
// cluster at url, each with its own data_dir, one route to downstream.
func startClusterGateways(t *testing.T, n int, url, downstream string) []*App {
	var gws []*App
	for range n {
		cfg := testConfig(t, fmt.Sprintf(`
nats: {url: %q, replicas: 3, duplicate_window: 1s, connect_timeout: 5s}
cluster: {enabled: true, claim_timeout: 10s}
routes:
  - {name: billing, sources: [stripe], url: %q}
`, url, downstream))
		gws = append(gws, startApp(t, cfg))
	}
	return gws
}

// waitDrained waits until no gateway has an event in its outbox and the
// stream holds no message a route has not acknowledged.
func waitDrained(t *testing.T, gws []*App) {
	t.Helper()
	gatewaytest.WaitFor(t, "outboxes and the stream drained", 90*time.Second, func() (bool, string) {
		for i, a := range gws {
			if _, ok, err := a.Store().OutboxOldest(context.Background()); ok || err != nil {
				return false, fmt.Sprintf("gateway %d: outbox not empty (%v)", i, err)
			}
		}
		if n := streamMsgs(gws[0]); n != 0 {
			return false, fmt.Sprintf("%d messages in the stream", n)
		}
		return true, ""
	})
}

// claimedElsewhere is the number of events a gateway recorded as held by
// another gateway.
func claimedElsewhere(t *testing.T, a *App) int64 {
	t.Helper()
	n, err := a.Store().CountClaimedElsewhere(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Three gateways on a 3-node NATS cluster: copies of each event sent to
// random gateways, spread over longer than the duplicate window. Every
// event is delivered exactly once (by Idempotency-Key), and every copy
// after the first is answered duplicate, wherever it lands.
func TestClusterDedupAcrossGateways(t *testing.T) {
	nc := gatewaytest.RunNATSCluster(t, 3)
	keys, downstream := newKeyCounter(t)
	gws := startClusterGateways(t, 3, nc.URL, downstream.URL)

	const events, copies = 40, 3
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed of the gateway choice: %d", seed)
	rng := rand.New(rand.NewPCG(seed, 22))
	var wrong []string
	for c := range copies {
		for e := range events {
			id := fmt.Sprintf("evt_cluster_%d", e)
			g := rng.IntN(len(gws))
			code, body := postStripe(t, gws[g], id)
			want := `"status":"duplicate"`
			if c == 0 {
				want = `"status":"accepted"`
			}
			if code != 200 || !strings.Contains(body, want) {
				wrong = append(wrong, fmt.Sprintf("copy %d of %s at gateway %d: %d %s", c, id, g, code, body))
			}
		}
		if c < copies-1 {
			time.Sleep(1200 * time.Millisecond) // past nats.duplicate_window: 1s
		}
	}
	if len(wrong) > 0 {
		t.Errorf("%d copies answered wrong:\n%s", len(wrong), strings.Join(wrong, "\n"))
	}
	waitDrained(t, gws)
	gatewaytest.WaitFor(t, "every event delivered", 30*time.Second, func() (bool, string) {
		n, _ := keys.counts()
		return n == events, fmt.Sprintf("%d of %d delivered", n, events)
	})
	if n, doubled := keys.counts(); n != events || doubled != 0 {
		t.Fatalf("delivered %d events, want %d; doubled %d, want 0", n, events, doubled)
	}
	var elsewhere int64
	for _, a := range gws {
		elsewhere += claimedElsewhere(t, a)
	}
	t.Logf("events recorded as held by another gateway: %d", elsewhere)
}

// NATS is down at intake: two copies of one event are accepted locally by
// two gateways. Once NATS is back, each relay claims before publishing:
// one publishes, the other records the event as held elsewhere, and the
// event is delivered once; a later copy on the third gateway is a
// duplicate.
func TestClusterClaimAfterNATSOutage(t *testing.T) {
	nc := gatewaytest.RunNATSCluster(t, 3)
	keys, downstream := newKeyCounter(t)
	gws := startClusterGateways(t, 3, nc.URL, downstream.URL)

	// The cluster works: one event through it first.
	if code, body := postStripe(t, gws[0], "evt_before"); code != 200 || !strings.Contains(body, "accepted") {
		t.Fatalf("before the outage: %d %s", code, body)
	}
	waitDrained(t, gws)

	for i := range nc.Servers {
		nc.Stop(i)
	}
	for i, g := range gws[:2] {
		if code, body := postStripe(t, g, "evt_outage"); code != 200 || !strings.Contains(body, `"status":"accepted"`) {
			t.Fatalf("copy at gateway %d while NATS is down: %d %s", i, code, body)
		}
	}
	for i := range nc.Servers {
		nc.Start(t, i)
	}
	nc.WaitLeader(t)
	waitDrained(t, gws)
	gatewaytest.WaitFor(t, "both events delivered", 30*time.Second, func() (bool, string) {
		n, _ := keys.counts()
		return n == 2, fmt.Sprintf("%d of 2 delivered", n)
	})
	if n, doubled := keys.counts(); n != 2 || doubled != 0 {
		t.Fatalf("delivered %d events, want 2; doubled %d, want 0", n, doubled)
	}
	if a, b := claimedElsewhere(t, gws[0]), claimedElsewhere(t, gws[1]); a+b != 1 {
		t.Fatalf("recorded as held elsewhere: gateway 0 %d, gateway 1 %d; want 1 in all", a, b)
	}
	if code, body := postStripe(t, gws[2], "evt_outage"); code != 200 || !strings.Contains(body, `"status":"duplicate"`) {
		t.Fatalf("a later copy at the third gateway: %d %s", code, body)
	}
}
