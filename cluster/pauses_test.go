package cluster_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/app"
	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// routeDownstream counts the requests of each route (X-Route) by event
// ID and gateway (X-Gw); it answers 200.
type routeDownstream struct {
	*httptest.Server
	mu   sync.Mutex
	reqs map[string]map[string][]string // route → event ID → gateways
}

func newRouteDownstream(t *testing.T) *routeDownstream {
	d := &routeDownstream{reqs: map[string]map[string][]string{}}
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		route, id := r.Header.Get("X-Route"), r.Header.Get("X-Hookgate-Event-Id")
		d.mu.Lock()
		if d.reqs[route] == nil {
			d.reqs[route] = map[string][]string{}
		}
		d.reqs[route][id] = append(d.reqs[route][id], r.Header.Get("X-Gw"))
		d.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(d.Close)
	return d
}

// delivered counts the events of ids route has had at least one request for.
func (d *routeDownstream) delivered(route string, ids []string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, id := range ids {
		if len(d.reqs[route][id]) > 0 {
			n++
		}
	}
	return n
}

// pauseGateway runs a gateway in cluster mode with data_dir dir and two
// routes of source s to url, p (the one paused) and c (the control), whose
// requests carry X-Gw: name and X-Route.
func pauseGateway(t *testing.T, name string, urls []string, url, dir string) *app.App {
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
  - {name: p, sources: [s], url: %q, headers: {X-Gw: %s, X-Route: p}, retries: 0, timeout: 30s, schedule: [50ms, 50ms, 50ms], breaker_threshold: 0}
  - {name: c, sources: [s], url: %q, headers: {X-Gw: %s, X-Route: c}, retries: 0, timeout: 30s, schedule: [50ms, 50ms, 50ms], breaker_threshold: 0}
`, dir, strings.Join(urls, ","), apiToken, url, name, url, name)
	return runGateway(t, name, yaml)
}

// setRoute pauses (action "pause") or resumes route on a, waiting (within
// a bound) for NATS to take it: the buckets of a cluster just made may
// have no leader yet.
func setRoute(t *testing.T, a *app.App, route, action string) {
	t.Helper()
	gatewaytest.WaitFor(t, action+" "+route, 60*time.Second, func() (bool, string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+a.Addr()+"/v1/routes/"+route+"/"+action, nil)
		req.Header.Set("Authorization", "Bearer "+apiToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("%d %s", resp.StatusCode, body)
	})
}

// routeState is route's state in a's GET /v1/routes.
func routeState(t *testing.T, a *app.App, route string) string {
	t.Helper()
	var page struct {
		Data []struct {
			Name  string `json:"name"`
			State string `json:"state"`
		} `json:"data"`
	}
	if code := apiGet(t, a, "/v1/routes", &page); code != http.StatusOK {
		return fmt.Sprintf("status %d", code)
	}
	for _, r := range page.Data {
		if r.Name == route {
			return r.State
		}
	}
	return "not listed"
}

// waitState waits until a's GET /v1/routes shows route in state.
func waitState(t *testing.T, a *app.App, name, route, state string) {
	t.Helper()
	gatewaytest.WaitFor(t, name+" shows route "+route+" "+state, 60*time.Second, func() (bool, string) {
		got := routeState(t, a, route)
		return got == state, got
	})
}

// postEvents sends n new events to a; it returns their IDs.
func postEvents(t *testing.T, a *app.App, prefix string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
		post(t, a, ids[i])
	}
	return ids
}

// waitDelivered waits until route had a request for every event of ids.
func waitDelivered(t *testing.T, d *routeDownstream, route string, ids []string) {
	t.Helper()
	gatewaytest.WaitFor(t, fmt.Sprintf("route %s delivered %d events", route, len(ids)), 90*time.Second, func() (bool, string) {
		n := d.delivered(route, ids)
		return n == len(ids), fmt.Sprintf("%d of %d", n, len(ids))
	})
}

// A pause asked on one gateway holds on every gateway: the other one
// shows it and delivers nothing of the route (while the control route
// delivers every event it takes); a resume asked on the other gateway
// holds on both, and what waited is delivered.
func TestPauseAcrossGateways(t *testing.T) {
	urls := runNATSCluster(t, 3)
	d := newRouteDownstream(t)
	a := pauseGateway(t, "a", urls, d.URL, t.TempDir())
	b := pauseGateway(t, "b", urls, d.URL, t.TempDir())

	setRoute(t, a, "p", "pause")
	if got := routeState(t, a, "p"); got != "paused" {
		t.Fatalf("a shows p %s right after its pause, want paused", got)
	}
	waitState(t, b, "b", "p", "paused")
	if got := routeState(t, b, "c"); got != "active" {
		t.Fatalf("b shows c %s, want active: a pause is the route's alone", got)
	}

	held := postEvents(t, b, "held", 10)
	waitDelivered(t, d, "c", held)
	if n := d.delivered("p", held); n != 0 {
		t.Fatalf("route p delivered %d of the events sent to b while paused on a, want 0", n)
	}

	setRoute(t, b, "p", "resume")
	waitState(t, a, "a", "p", "active")
	if got := routeState(t, b, "p"); got != "active" {
		t.Fatalf("b shows p %s right after its resume, want active", got)
	}
	waitDelivered(t, d, "p", held)
	more := append(postEvents(t, a, "after-a", 5), postEvents(t, b, "after-b", 5)...)
	waitDelivered(t, d, "p", more)
	waitDelivered(t, d, "c", more)
}

// A gateway that was down when a route was paused elsewhere starts
// paused, and delivers nothing of it; one down when it was resumed
// elsewhere starts delivering it again, whatever its own store recorded.
func TestPauseSetWhileGatewayDown(t *testing.T) {
	urls := runNATSCluster(t, 3)
	d := newRouteDownstream(t)
	a := pauseGateway(t, "a", urls, d.URL, t.TempDir())
	dirB := t.TempDir()
	b := pauseGateway(t, "b", urls, d.URL, dirB)
	warm := postEvents(t, b, "warm", 2)
	waitDelivered(t, d, "p", warm)

	if err := b.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	setRoute(t, a, "p", "pause")
	b = pauseGateway(t, "b", urls, d.URL, dirB)
	if got := routeState(t, b, "p"); got != "paused" {
		t.Logf("b shows p %s right after its start (the bucket was slow to answer)", got)
	}
	waitState(t, b, "b", "p", "paused")
	held := postEvents(t, b, "held", 10)
	waitDelivered(t, d, "c", held)
	if n := d.delivered("p", held); n != 0 {
		t.Fatalf("route p delivered %d of the events sent to b, which started after the pause on a; want 0", n)
	}

	// b's store now records p paused; resumed on a while b is down.
	if err := b.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	setRoute(t, a, "p", "resume")
	b = pauseGateway(t, "b", urls, d.URL, dirB)
	waitState(t, b, "b", "p", "active")
	waitDelivered(t, d, "p", held)
	more := postEvents(t, b, "after", 5)
	waitDelivered(t, d, "p", more)
}
