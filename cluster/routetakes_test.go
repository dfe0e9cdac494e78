package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/app"
	"github.com/hookgate/hookgate/cluster"
	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// takesGateway runs a gateway in cluster mode with data_dir dir and a
// route r of source s's events of types events (a YAML list) to url,
// whose requests carry X-Gw: name and X-Route: r.
func takesGateway(t *testing.T, name string, urls []string, url, dir, events, extra string) *app.App {
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
  - {name: r, sources: [s], events: %s, url: %q, headers: {X-Gw: %s, X-Route: r}, retries: 0, timeout: 30s, schedule: [50ms, 50ms, 50ms], breaker_threshold: 0}
%s`, dir, strings.Join(urls, ","), apiToken, events, url, name, extra)
	return runGateway(t, name, yaml)
}

// postTyped sends event id of type typ to gateway a.
func postTyped(t *testing.T, a *app.App, id, typ string) {
	t.Helper()
	resp, err := http.Post("http://"+a.Addr()+"/webhooks/s", "application/json",
		strings.NewReader(fmt.Sprintf(`{"id":%q,"type":%q}`, id, typ)))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"accepted"`)) {
		t.Fatalf("post %s: %d %s", id, resp.StatusCode, body)
	}
}

// A route's events widened by a rolling change made while the route is
// paused lose nothing: the gateway still on the old configuration holds
// the events of the new kind as it holds the others, and once every
// gateway has the change and the route is resumed, each is delivered
// once. (The paused route acked them as not its own, without a delivery:
// lost, and kept for good by the retention of the gateways that took them.)
// Unpaused, a gateway on the old configuration acks without a delivery
// the events of the new kind it pulls (README: Delivery to routes).
func TestRollingWidenWhilePausedLosesNothing(t *testing.T) {
	urls := runNATSCluster(t, 3)
	d := newRouteDownstream(t)
	dirA, dirB := t.TempDir(), t.TempDir()
	const before, after = `["t"]`, `["t", "u"]`
	a := takesGateway(t, "a", urls, d.URL, dirA, before, "")
	b := takesGateway(t, "b", urls, d.URL, dirB, before, "")
	postTyped(t, b, "first", "t")
	waitDelivered(t, d, "r", []string{"first"})
	setRoute(t, a, "r", "pause")
	waitState(t, b, "b", "r", "paused")
	_ = a.Stop(context.Background()) // a is being changed; b, unchanged, pulls alone
	ids := make([]string, 10)
	for i := range ids {
		ids[i] = fmt.Sprintf("u-%d", i)
		postTyped(t, b, ids[i], "u")
	}
	js := connectJS(t, strings.Join(urls, ","))
	gatewaytest.WaitFor(t, "b pulled every event of the new kind", 60*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, "HOOKGATE_EVENTS")
		if err != nil {
			return false, err.Error()
		}
		c, err := js.Consumer(ctx, "HOOKGATE_EVENTS", "route_r")
		if err != nil {
			return false, err.Error()
		}
		last, got := st.CachedInfo().State.LastSeq, c.CachedInfo().Delivered.Stream
		return got >= last, fmt.Sprintf("delivered up to %d of %d", got, last)
	})
	a = takesGateway(t, "a", urls, d.URL, dirA, after, "")
	_ = b.Stop(context.Background())
	b = takesGateway(t, "b", urls, d.URL, dirB, after, "")
	waitState(t, a, "a", "r", "paused")
	waitState(t, b, "b", "r", "paused")
	setRoute(t, b, "r", "resume")
	waitDelivered(t, d, "r", ids)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, id := range ids {
		if n := len(d.reqs["r"][id]); n != 1 {
			t.Errorf("%s delivered %d times, want once", id, n)
		}
	}
}

// routeLine is a route name of source s to url whose requests carry X-Gw:
// gw and X-Route: name.
func routeLine(name, url, gw string) string {
	return fmt.Sprintf("  - {name: %s, sources: [s], url: %q, headers: {X-Gw: %s, X-Route: %s}, retries: 0, timeout: 30s, schedule: [50ms], breaker_threshold: 0}\n",
		name, url, gw, name)
}

// routesGateway runs a gateway in cluster mode (records kept an hour) with
// data_dir dir, the top-level keys extra and routes.
func routesGateway(t *testing.T, name string, urls []string, dir, extra, routes string) *app.App {
	t.Helper()
	return runGateway(t, name, fmt.Sprintf(`
listen: "127.0.0.1:0"
data_dir: %q
nats: {url: %q, replicas: 3}
cluster: {enabled: true, records_ttl: 1h}
api: {tokens: [%q]}
sources:
  - {name: s, verify: none, id_field: id, type_field: type}
%sroutes:
%s`, dir, strings.Join(urls, ","), apiToken, extra, routes))
}

// A gateway that joins a cluster with an empty store takes a route as
// configured when the cluster's first gateway with it made its consumer:
// its retention does not wait for the route on the events received
// before, of which the records gave it a copy and the route never had a
// delivery. (It took every route as configured from the start, and kept
// those events for good.)
func TestJoiningGatewayPrunesWhatRouteAddedLaterNeverHad(t *testing.T) {
	urls := runNATSCluster(t, 3)
	d := newRouteDownstream(t)
	dirA := t.TempDir()
	a := routesGateway(t, "a", urls, dirA, "", routeLine("c", d.URL, "a"))
	postTyped(t, a, "old", "t")
	waitDelivered(t, d, "c", []string{"old"})
	_ = a.Stop(context.Background())
	both := routeLine("c", d.URL, "a") + routeLine("r", d.URL, "a")
	a = routesGateway(t, "a", urls, dirA, "", both) // r added: its consumer made now
	postTyped(t, a, "new", "t")
	waitDelivered(t, d, "r", []string{"new"})
	waitDelivered(t, d, "c", []string{"new"})

	dirJ, routesJ := t.TempDir(), routeLine("c", d.URL, "j")+routeLine("r", d.URL, "j")
	j := routesGateway(t, "j", urls, dirJ, "", routesJ)
	gatewaytest.WaitFor(t, "j has old and new, delivered, from the records", 60*time.Second, func() (bool, string) {
		var got []string
		for _, id := range []string{"old", "new"} {
			var ev eventView
			if apiGet(t, j, "/v1/events/s/"+id, &ev) == http.StatusOK {
				got = append(got, fmt.Sprintf("%s:%d", id, len(ev.Deliveries)))
			}
		}
		return len(got) == 2 && got[0] == "old:1" && got[1] == "new:2", fmt.Sprint(got)
	})
	_ = j.Stop(context.Background())
	j = routesGateway(t, "j", urls, dirJ, "retention: {events: 1s, interval: 100ms}\n", routesJ)
	postTyped(t, j, "pad", "t") // retention keeps a store's newest event
	waitDelivered(t, d, "r", []string{"pad"})
	for _, id := range []string{"old", "new"} {
		gatewaytest.WaitFor(t, "j pruned "+id, 60*time.Second, func() (bool, string) {
			var ev eventView
			code := apiGet(t, j, "/v1/events/s/"+id, &ev)
			return code == http.StatusNotFound, fmt.Sprint(code)
		})
	}
	if n := d.delivered("r", []string{"old"}); n != 0 {
		t.Errorf("route r, added after old, was given it")
	}
}

// A route's events widened by a rolling change, unpaused, lose nothing:
// while one gateway has the change and the other not, the one on the old
// configuration holds (naks) the events of the new kind it pulls, since
// the other's route takes them (HOOKGATE_TAKES), and every one is
// delivered once; retention then prunes them on both gateways. (The old
// configuration acked them without a delivery: about half were lost, and
// the new one's retention kept them for good.)
func TestRollingWidenUnpausedLosesNothing(t *testing.T) {
	rollingChange(t, `["t"]`, `["t", "u"]`)
}

// Likewise narrowed: the gateway with the change holds the events of the
// kind dropped while the other one's route still takes them, and that
// one delivers each once.
func TestRollingNarrowUnpausedLosesNothing(t *testing.T) {
	rollingChange(t, `["t", "u"]`, `["t"]`)
}

// rollingChange changes route r's events from before to after on a, then
// on b, and checks that the events of type u sent meanwhile are each
// delivered once and pruned by both gateways' retention.
func rollingChange(t *testing.T, before, after string) {
	t.Helper()
	urls := runNATSCluster(t, 3)
	d := newRouteDownstream(t)
	dirA, dirB := t.TempDir(), t.TempDir()
	const prune = "retention: {events: 1s, interval: 100ms}\n"
	a := takesGateway(t, "a", urls, d.URL, dirA, before, prune)
	b := takesGateway(t, "b", urls, d.URL, dirB, before, prune)
	postTyped(t, b, "first", "t")
	waitDelivered(t, d, "r", []string{"first"})
	_ = a.Stop(context.Background())
	a = takesGateway(t, "a", urls, d.URL, dirA, after, prune)
	ids := make([]string, 20)
	for i := range ids {
		ids[i] = fmt.Sprintf("u-%d", i)
		postTyped(t, []*app.App{a, b}[i%2], ids[i], "u")
	}
	waitDelivered(t, d, "r", ids)
	_ = b.Stop(context.Background())
	b = takesGateway(t, "b", urls, d.URL, dirB, after, prune)
	postTyped(t, b, "pad", "t") // retention keeps a store's newest event
	waitDelivered(t, d, "r", []string{"pad"})
	d.mu.Lock()
	for _, id := range ids {
		if n := len(d.reqs["r"][id]); n != 1 {
			t.Errorf("%s delivered %d times, want once", id, n)
		}
	}
	d.mu.Unlock()
	for _, g := range []*app.App{a, b} {
		gatewaytest.WaitFor(t, "retention pruned the events of the new kind", 60*time.Second, func() (bool, string) {
			var kept []string
			for _, id := range ids {
				var ev eventView
				if apiGet(t, g, "/v1/events/s/"+id, &ev) != http.StatusNotFound {
					kept = append(kept, id)
				}
			}
			return len(kept) == 0, fmt.Sprint("kept ", kept)
		})
	}
}

// A gateway gone for good without a clean stop, whose route took more
// than the others' (its record left in HOOKGATE_TAKES), has the others
// hold the messages only it took until its record's ttl passes; then
// they ack them as no route's.
func TestGoneGatewayTakesExpire(t *testing.T) {
	urls := runNATSCluster(t, 3)
	d := newRouteDownstream(t)
	js := connectJS(t, strings.Join(urls, ","))
	const ttl = 10 * time.Second
	b := runGateway(t, "b", fmt.Sprintf(`
listen: "127.0.0.1:0"
data_dir: %q
nats: {url: %q, replicas: 3}
cluster: {enabled: true, takes_ttl: %s}
api: {tokens: [%q]}
sources:
  - {name: s, verify: none, id_field: id, type_field: type}
routes:
  - {name: r, sources: [s], events: ["t"], url: %q, headers: {X-Gw: b, X-Route: r}, retries: 0, timeout: 30s, schedule: [50ms], breaker_threshold: 0}
`, t.TempDir(), strings.Join(urls, ","), ttl, apiToken, d.URL))
	gone, err := cluster.NewTakes(cluster.TakesConfig{Gateway: "gone", Replicas: 3, TTL: ttl,
		JetStream: func() natsjs.JetStream { return js }}, testLog())
	if err != nil {
		t.Fatal(err)
	}
	if err := gone.Announce(context.Background(), "r", []string{"s"}, []string{"t", "u"}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		postTyped(t, b, fmt.Sprintf("u-%d", i), "u")
	}
	consumer := func() (*natsjs.ConsumerInfo, uint64, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, "HOOKGATE_EVENTS")
		if err != nil {
			return nil, 0, err
		}
		c, err := js.Consumer(ctx, "HOOKGATE_EVENTS", "route_r")
		if err != nil {
			return nil, 0, err
		}
		return c.CachedInfo(), st.CachedInfo().State.Msgs, nil
	}
	gatewaytest.WaitFor(t, "b held (nak'd) a message of the gone gateway's kind", 30*time.Second, func() (bool, string) {
		c, _, err := consumer()
		if err != nil {
			return false, err.Error()
		}
		return c.NumRedelivered > 0, fmt.Sprintf("redelivered %d, pending ack %d", c.NumRedelivered, c.NumAckPending)
	})
	gatewaytest.WaitFor(t, "b acked them once the gone gateway's record expired", 60*time.Second, func() (bool, string) {
		c, msgs, err := consumer()
		if err != nil {
			return false, err.Error()
		}
		return c.NumAckPending == 0 && c.NumPending == 0 && msgs == 0,
			fmt.Sprintf("pending ack %d, pending %d, stream holds %d", c.NumAckPending, c.NumPending, msgs)
	})
	if n := d.delivered("r", []string{"u-0", "u-1", "u-2", "u-3", "u-4"}); n != 0 {
		t.Errorf("%d events of a kind route r does not take here delivered", n)
	}
}

// A gateway started with a route widened records what the route takes in
// HOOKGATE_TAKES before it records the change in its store (route_takes),
// from when its events of the new kind are the route's: the other
// gateways hold them from then on.
func TestWidenedRouteRecordedBeforeItsChange(t *testing.T) {
	urls := runNATSCluster(t, 3)
	d := newRouteDownstream(t)
	dirA := t.TempDir()
	a := takesGateway(t, "a", urls, d.URL, dirA, `["t"]`, "")
	b := takesGateway(t, "b", urls, d.URL, t.TempDir(), `["t"]`, "")
	postTyped(t, b, "first", "t")
	waitDelivered(t, d, "r", []string{"first"})
	_ = a.Stop(context.Background())

	// Every record written from here on, with the server's time.
	ctx := context.Background()
	_, js := gatewaytest.ConnectJetStream(t, strings.Join(urls, ","))
	kv, err := js.KeyValue(ctx, cluster.DefaultTakesBucket)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.WatchAll(ctx, natsjs.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	a = takesGateway(t, "a", urls, d.URL, dirA, `["t", "u"]`, "")
	var recorded time.Time // the first record of u
	for recorded.IsZero() {
		select {
		case e := <-w.Updates():
			if e != nil && e.Operation() == natsjs.KeyValuePut && bytes.Contains(e.Value(), []byte(`"u"`)) {
				recorded = e.Created()
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no record of route r taking u in the bucket within 30s")
		}
	}

	raw, err := a.Store().Meta(ctx, "route_takes:r")
	if err != nil {
		t.Fatal(err)
	}
	var history []struct {
		Since  int64    `json:"since"`
		Events []string `json:"events"`
	}
	if err := json.Unmarshal([]byte(raw), &history); err != nil || len(history) == 0 {
		t.Fatalf("route_takes:r = %q: %v", raw, err)
	}
	changed := history[len(history)-1]
	if !slices.Contains(changed.Events, "u") {
		t.Fatalf("route_takes:r = %s: the change to u is not recorded", raw)
	}
	// since is in ms: the record comes no later than its millisecond.
	if since := time.UnixMilli(changed.Since + 1); !recorded.Before(since) {
		t.Errorf("the record of u written at %s, after the change recorded at %s",
			recorded.Format(time.RFC3339Nano), time.UnixMilli(changed.Since).Format(time.RFC3339Nano))
	}
}
