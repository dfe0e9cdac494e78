package cluster_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/app"
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/jetstream"
	"github.com/hookgate/hookgate/store"
)

// seen is one request a downstream saw.
type seen struct {
	gw, attempt string
	status      int
}

// keyed is a downstream that counts requests per Idempotency-Key and the
// most of them in flight at once. respond answers the n-th request of an
// event (from 0); it may block until r's context ends.
type keyed struct {
	*httptest.Server
	mu      sync.Mutex
	running map[string]int
	peak    map[string]int
	reqs    map[string][]seen // by event ID
	respond func(r *http.Request, id string, n int) int
}

func newKeyed(t *testing.T, respond func(r *http.Request, id string, n int) int) *keyed {
	k := &keyed{running: map[string]int{}, peak: map[string]int{}, reqs: map[string][]seen{}, respond: respond}
	k.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // then r's context ends when the client goes
		key, id := r.Header.Get("Idempotency-Key"), r.Header.Get("X-Hookgate-Event-Id")
		k.mu.Lock()
		k.running[key]++
		k.peak[key] = max(k.peak[key], k.running[key])
		n := len(k.reqs[id])
		k.reqs[id] = append(k.reqs[id], seen{gw: r.Header.Get("X-Gw"), attempt: r.Header.Get("X-Hookgate-Attempt")})
		k.mu.Unlock()
		status := k.respond(r, id, n)
		k.mu.Lock()
		k.running[key]--
		k.reqs[id][n].status = status
		k.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(k.Close)
	return k
}

// of is what the downstream saw of event id.
func (k *keyed) of(id string) []seen {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]seen(nil), k.reqs[id]...)
}

func successes(ss []seen) (n int, last seen) {
	for _, s := range ss {
		if s.status >= 200 && s.status < 300 {
			n++
			last = s
		}
	}
	return n, last
}

const apiToken = "cluster-test-token-0123456789"

// startGateway runs a gateway in cluster mode on the NATS cluster, with
// its own data_dir, and a route r to url whose requests carry X-Gw: name.
func startGateway(t *testing.T, name string, urls []string, url string) *app.App {
	t.Helper()
	yaml := fmt.Sprintf(`
listen: "127.0.0.1:0"
data_dir: %q
nats: {url: %q, replicas: 3}
cluster: {enabled: true}
api: {tokens: [%q]}
sources:
  - {name: s, verify: none, id_field: id, type_field: type}
routes:
  - {name: r, sources: [s], url: %q, headers: {X-Gw: %s}, retries: 0, timeout: 30s, schedule: [50ms, 50ms, 50ms], breaker_threshold: 0}
`, t.TempDir(), strings.Join(urls, ","), apiToken, url, name)
	return runGateway(t, name, yaml)
}

// runGateway starts the gateway of yaml, named name in its log; stopped
// when the test ends.
func runGateway(t *testing.T, name, yaml string) *app.App {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	a := app.New(cfg, testLog().With("gw", name))
	if err := a.Start(context.Background()); err != nil {
		_ = a.Stop(context.Background())
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() { _ = a.Stop(context.Background()) })
	return a
}

// publisher publishes copies of events to the stream as gateways' relays
// would before the cluster's dedup claim: each under its own Nats-Msg-Id,
// with no Hookgate-Seq (every gateway stores the event as its own).
type publisher struct {
	t  *testing.T
	js natsjs.JetStream
}

// newPublisher connects to the cluster once the gateways' relays have
// declared the route's consumer on the events stream (they do before their
// first publish, beside the gateway's start): until then the interest
// stream drops what it is sent.
func newPublisher(t *testing.T, urls []string) *publisher {
	nc, err := nats.Connect(strings.Join(urls, ","))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := natsjs.New(nc)
	gatewaytest.WaitFor(t, "route r's consumer on the events stream", 30*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := js.Consumer(ctx, "HOOKGATE_EVENTS", "route_r"); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	return &publisher{t: t, js: js}
}

func (p *publisher) publish(id string, copyN int) {
	p.t.Helper()
	h := nats.Header{}
	h.Set(jetstream.HeaderSource, "s")
	h.Set(jetstream.HeaderEventID, id)
	h.Set(jetstream.HeaderEventType, "t")
	h.Set("Content-Type", "application/json")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := p.js.PublishMsg(ctx, &nats.Msg{Subject: jetstream.Subject("s", "t"), Header: h,
		Data: []byte(fmt.Sprintf(`{"id":%q,"type":"t"}`, id))}, natsjs.WithMsgID("copy"+strconv.Itoa(copyN)+":"+id))
	if err != nil {
		p.t.Fatal(err)
	}
}

// drained waits until every copy was handled: the stream (interest
// retention, route r the only consumer of its subjects) holds no message,
// each acknowledged once it was delivered, or read as delivered or dead.
func (p *publisher) drained() {
	p.t.Helper()
	gatewaytest.WaitFor(p.t, "the stream drained", 90*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := p.js.Stream(ctx, "HOOKGATE_EVENTS")
		if err != nil {
			return false, err.Error()
		}
		si, err := st.Info(ctx)
		if err != nil {
			return false, err.Error()
		}
		return si.State.Msgs == 0, fmt.Sprintf("%d messages", si.State.Msgs)
	})
}

// Three gateways take copies of the same events (as from two relays):
// each (route, event) succeeds once, never with two rounds at once, a
// dead one is not run again by another gateway, and the attempts of a
// delivery are counted across gateways.
func TestOneDeliveryAcrossGateways(t *testing.T) {
	urls := runNATSCluster(t, 3)
	ds := newKeyed(t, func(_ *http.Request, id string, n int) int {
		switch {
		case strings.HasPrefix(id, "dead-"):
			return http.StatusGone
		case strings.HasPrefix(id, "flaky-") && n == 0:
			return http.StatusInternalServerError
		}
		time.Sleep(20 * time.Millisecond) // a round long enough for copies to meet it
		return http.StatusNoContent
	})
	for i := range 3 {
		startGateway(t, "gw"+strconv.Itoa(i), urls, ds.URL)
	}
	p := newPublisher(t, urls)
	var ids []string
	for i := range 20 {
		ids = append(ids, fmt.Sprintf("ok-%d", i))
	}
	for i := range 5 {
		ids = append(ids, fmt.Sprintf("flaky-%d", i), fmt.Sprintf("dead-%d", i))
	}
	for c := range 3 {
		for _, id := range ids {
			p.publish(id, c)
		}
	}
	p.drained()
	for _, id := range ids { // copies after the outcome: read, not run
		p.publish(id, 3)
	}
	p.drained()

	ds.mu.Lock()
	for key, n := range ds.peak {
		if n > 1 {
			t.Errorf("%d requests of %s at once", n, key)
		}
	}
	ds.mu.Unlock()
	gws := map[string]bool{}
	for _, id := range ids {
		got := ds.of(id)
		n, last := successes(got)
		for _, s := range got {
			gws[s.gw] = true
		}
		switch {
		case strings.HasPrefix(id, "dead-"):
			if len(got) != 1 {
				t.Errorf("%s: %d requests (%+v), want 1: a dead delivery is not run again", id, len(got), got)
			}
		case n != 1:
			t.Errorf("%s: %d successful deliveries (%+v), want 1", id, n, got)
		case last.attempt != strconv.Itoa(len(got)):
			t.Errorf("%s: the success is attempt %s of %d requests (%+v): attempts are counted across gateways", id, last.attempt, len(got), got)
		}
	}
	keys := make([]string, 0, len(gws))
	for gw := range gws {
		keys = append(keys, gw)
	}
	sort.Strings(keys)
	t.Logf("gateways that delivered: %v", keys)
}

// A gateway stopped in the middle of a round (its context cancelled)
// hands the delivery over: another gateway runs the next round, counting
// the cut attempt, and the event is delivered once.
func TestRoundCutShortTakenOver(t *testing.T) {
	urls := runNATSCluster(t, 3)
	ds := newKeyed(t, func(r *http.Request, _ string, n int) int {
		if n == 0 {
			<-r.Context().Done() // held until the gateway gives up
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	gws := map[string]*app.App{"a": startGateway(t, "a", urls, ds.URL), "b": startGateway(t, "b", urls, ds.URL)}
	p := newPublisher(t, urls)
	p.publish("slow", 0)
	var first string
	gatewaytest.WaitFor(t, "the first request", 30*time.Second, func() (bool, string) {
		got := ds.of("slow")
		if len(got) == 0 {
			return false, "none"
		}
		first = got[0].gw
		return true, ""
	})
	other := map[string]string{"a": "b", "b": "a"}[first]
	stop, cancel := context.WithCancel(context.Background())
	cancel()
	_ = gws[first].Stop(stop)

	gatewaytest.WaitFor(t, "the delivery by "+other, 60*time.Second, func() (bool, string) {
		n, _ := successes(ds.of("slow"))
		return n > 0, fmt.Sprintf("%+v", ds.of("slow"))
	})
	p.drained()
	got := ds.of("slow")
	n, last := successes(got)
	if n != 1 || last.gw != other || last.attempt != "2" || len(got) != 2 {
		t.Fatalf("requests %+v: want the cut one by %s, then one success by %s as attempt 2", got, first, other)
	}
	d, err := gws[other].Store().Delivery(context.Background(), "r", "s", "slow")
	if err != nil || d.State != store.StateSucceeded {
		t.Fatalf("%s's record: %+v, %v", other, d, err)
	}
}

// A dead delivery is sent again only by an operator's retry, on the
// gateway that recorded it; its success is then what every gateway reads.
func TestOperatorRetryAcrossGateways(t *testing.T) {
	urls := runNATSCluster(t, 3)
	var mu sync.Mutex
	gone := true
	ds := newKeyed(t, func(*http.Request, string, int) int {
		mu.Lock()
		defer mu.Unlock()
		if gone {
			return http.StatusGone
		}
		return http.StatusOK
	})
	gws := []*app.App{startGateway(t, "a", urls, ds.URL), startGateway(t, "b", urls, ds.URL)}
	p := newPublisher(t, urls)
	p.publish("e1", 0)
	p.drained()
	p.publish("e1", 1) // another copy: dead, not sent again
	p.drained()
	if got := ds.of("e1"); len(got) != 1 {
		t.Fatalf("requests before the retry: %+v, want 1", got)
	}
	var owner *app.App
	var d *store.Delivery
	for _, g := range gws {
		if got, err := g.Store().Delivery(context.Background(), "r", "s", "e1"); err == nil && got.State == store.StateDead {
			owner, d = g, got
		}
	}
	if owner == nil {
		t.Fatal("no gateway recorded the dead delivery")
	}
	if d.UID != store.DeliveryUID("r", "s", "e1") {
		t.Fatalf("the delivery's API ID is %q, want the one derived from (r, s, e1)", d.UID)
	}
	retry := func(g *app.App, id string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://%s/v1/deliveries/%s/retry", g.Addr(), id), nil)
		req.Header.Set("Authorization", "Bearer "+apiToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	// A row number names a row of one gateway: refused on every gateway
	// in cluster mode, before it can act on another delivery.
	for _, g := range gws {
		if code, body := retry(g, strconv.FormatInt(d.ID, 10)); code != http.StatusBadRequest ||
			!strings.Contains(body, "invalid_parameter") || !strings.Contains(body, "dl_") {
			t.Fatalf("retry by row number %d: %d %s, want 400 invalid_parameter naming the dl_ form", d.ID, code, body)
		}
	}
	if got := ds.of("e1"); len(got) != 1 {
		t.Fatalf("requests after the refused retries: %+v, want 1", got)
	}
	mu.Lock()
	gone = false
	mu.Unlock()
	if code, body := retry(owner, d.UID); code != http.StatusAccepted || !strings.Contains(body, `"id":"`+d.UID+`"`) {
		t.Fatalf("retry answered %d %s", code, body)
	}
	gatewaytest.WaitFor(t, "the retry's success", 30*time.Second, func() (bool, string) {
		n, _ := successes(ds.of("e1"))
		return n == 1, fmt.Sprintf("%+v", ds.of("e1"))
	})
	for c := 2; c < 5; c++ { // copies after the retry: read as succeeded wherever they go
		p.publish("e1", c)
	}
	p.drained()
	got := ds.of("e1")
	if n, last := successes(got); n != 1 || len(got) != 2 || last.attempt != "2" {
		t.Fatalf("requests %+v: want the dead one, then the retry's success as attempt 2", got)
	}
}
