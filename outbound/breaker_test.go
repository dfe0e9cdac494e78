package outbound_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/store"
)

func (g *gateway) route(t *testing.T, name string) outbound.RouteStatus {
	t.Helper()
	code, body := g.api(t, http.MethodGet, "/v1/routes", apiToken)
	if code != 200 {
		t.Fatalf("routes: %d %s", code, body)
	}
	var out struct{ Data []outbound.RouteStatus }
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatal(err)
	}
	for _, r := range out.Data {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("route %s not listed in %s", name, body)
	return outbound.RouteStatus{}
}

// The breaker opens after a run of failed rounds, lets one probe through
// after the cool-down, reopens when it fails and closes when it succeeds.
func TestBreakerOpensProbesAndCloses(t *testing.T) {
	var healthy atomic.Bool
	var requests atomic.Int32
	ds := newDownstream(t, func(w http.ResponseWriter, r *http.Request, n int) int {
		requests.Add(1)
		if !healthy.Load() {
			w.WriteHeader(500)
			return 500
		}
		w.WriteHeader(200)
		return 200
	})
	g := startGateway(t, baseConfig(t, routeYAML("flaky", ds.URL,
		", retries: 0, concurrency: 1, breaker_threshold: 2, breaker_cooldown: 1s, schedule: [10ms, 10ms, 10ms, 10ms, 10ms, 10ms, 10ms, 10ms]")))
	for i := 0; i < 4; i++ {
		g.send(t, fmt.Sprintf("evt_%d", i), "a")
	}
	waitFor(t, "breaker open", func() (bool, string) {
		r := g.route(t, "flaky")
		return r.State == outbound.RouteOpen, fmt.Sprintf("%+v", r)
	})
	// While open nothing is attempted; after the cool-down one probe fails
	// and the breaker opens again.
	before := requests.Load()
	waitFor(t, "a probe", func() (bool, string) {
		return requests.Load() > before, fmt.Sprint(requests.Load())
	})
	waitFor(t, "breaker open after a failed probe", func() (bool, string) {
		r := g.route(t, "flaky")
		return r.State == outbound.RouteOpen && r.ConsecutiveFailures >= 3, fmt.Sprintf("%+v", r)
	})
	if got := requests.Load(); got != before+1 {
		t.Fatalf("%d requests during one cool-down and probe, want exactly 1 probe", got-before)
	}
	healthy.Store(true)
	for i := 0; i < 4; i++ {
		g.waitState(t, "flaky", "stripe", fmt.Sprintf("evt_%d", i), store.StateSucceeded)
	}
	if r := g.route(t, "flaky"); r.State != outbound.RouteActive || r.ConsecutiveFailures != 0 || r.LastSuccess.IsZero() {
		t.Fatalf("after recovery: %+v", r)
	}
}

func TestOperatorPauseResume(t *testing.T) {
	ds := newDownstream(t, nil)
	g := startGateway(t, baseConfig(t, routeYAML("r", ds.URL, "")))
	if code, body := g.api(t, http.MethodPost, "/v1/routes/r/pause", apiToken); code != 200 || !strings.Contains(body, `"state":"paused"`) {
		t.Fatalf("pause: %d %s", code, body)
	}
	for i := 0; i < 3; i++ {
		g.send(t, fmt.Sprintf("evt_%d", i), "a")
	}
	waitFor(t, "backlog of 3", func() (bool, string) {
		r := g.route(t, "r")
		return r.Backlog == 3, fmt.Sprintf("%+v", r)
	})
	if n := len(ds.requests()); n != 0 {
		t.Fatalf("a paused route sent %d requests", n)
	}
	if code, _ := g.api(t, http.MethodPost, "/v1/routes/nope/pause", apiToken); code != 404 {
		t.Fatalf("unknown route: %d, want 404", code)
	}
	if code, body := g.api(t, http.MethodPost, "/v1/routes/r/resume", apiToken); code != 200 || !strings.Contains(body, `"state":"active"`) {
		t.Fatalf("resume: %d %s", code, body)
	}
	for i := 0; i < 3; i++ {
		g.waitState(t, "r", "stripe", fmt.Sprintf("evt_%d", i), store.StateSucceeded)
	}
}
