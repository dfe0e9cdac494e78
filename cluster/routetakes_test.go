package cluster_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/app"
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
