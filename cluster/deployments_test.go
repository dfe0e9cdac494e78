package cluster_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/hookgate/hookgate/app"
	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// deploymentGateway runs a gateway of the deployment whose events stream
// is stream, in cluster mode on the NATS at urls, with pauseGateway's
// routes p and c to url.
func deploymentGateway(t *testing.T, name, stream, urls, url string) *app.App {
	t.Helper()
	yaml := fmt.Sprintf(`
listen: "127.0.0.1:0"
data_dir: %q
nats: {url: %q, stream: %s}
cluster: {enabled: true}
api: {tokens: [%q]}
sources:
  - {name: s, verify: none, id_field: id, type_field: type}
routes:
  - {name: p, sources: [s], url: %q, headers: {X-Gw: %s, X-Route: p}, retries: 0, timeout: 30s, schedule: [50ms, 50ms, 50ms], breaker_threshold: 0}
  - {name: c, sources: [s], url: %q, headers: {X-Gw: %s, X-Route: c}, retries: 0, timeout: 30s, schedule: [50ms, 50ms, 50ms], breaker_threshold: 0}
`, t.TempDir(), urls, stream, apiToken, url, name, url, name)
	return runGateway(t, name, yaml)
}

// Two deployments on one NATS (production on the default nats.stream,
// staging on another) share nothing: the same event ID sent to both is
// delivered once by each to its own downstream, neither store holds the
// other's events, and a pause of route p in one leaves the other's p
// delivering.
func TestDeploymentsOnOneNATS(t *testing.T) {
	urls := gatewaytest.RunNATS(t, 0, t.TempDir()).ClientURL()
	prodDS, stagingDS := newRouteDownstream(t), newRouteDownstream(t)
	prod := []*app.App{deploymentGateway(t, "prod1", "HOOKGATE_EVENTS", urls, prodDS.URL),
		deploymentGateway(t, "prod2", "HOOKGATE_EVENTS", urls, prodDS.URL)}
	staging := []*app.App{deploymentGateway(t, "staging1", "STAGING_EVENTS", urls, stagingDS.URL),
		deploymentGateway(t, "staging2", "STAGING_EVENTS", urls, stagingDS.URL)}

	var both []string
	for i := range 3 {
		id := fmt.Sprintf("both-%d", i)
		post(t, prod[i%2], id)
		post(t, staging[i%2], id)
		both = append(both, id)
	}
	prodOnly, stagingOnly := postEvents(t, prod[0], "prod", 2), postEvents(t, staging[1], "staging", 2)
	waitDelivered(t, prodDS, "c", append(both, prodOnly...))
	waitDelivered(t, stagingDS, "c", append(both, stagingOnly...))
	waitDelivered(t, prodDS, "p", append(both, prodOnly...))
	waitDelivered(t, stagingDS, "p", append(both, stagingOnly...))
	for name, d := range map[string]*routeDownstream{"production": prodDS, "staging": stagingDS} {
		d.mu.Lock()
		for route, ids := range d.reqs {
			for id, gws := range ids {
				if len(gws) != 1 {
					t.Errorf("%s's route %s: %s delivered %d times (by %v), want once", name, route, id, len(gws), gws)
				}
			}
		}
		d.mu.Unlock()
	}
	if n := prodDS.delivered("c", stagingOnly); n != 0 {
		t.Errorf("production's downstream had %d of staging's events", n)
	}
	if n := stagingDS.delivered("c", prodOnly); n != 0 {
		t.Errorf("staging's downstream had %d of production's events", n)
	}

	setRoute(t, prod[0], "p", "pause")
	waitState(t, prod[1], "prod2", "p", "paused")
	held := []string{"held-0", "held-1"}
	for _, id := range held {
		post(t, prod[0], id)
		post(t, staging[0], id)
	}
	waitDelivered(t, stagingDS, "p", held)
	waitDelivered(t, prodDS, "c", held)
	for _, g := range staging {
		if got := routeState(t, g, "p"); got != "active" {
			t.Errorf("staging shows p %s after production's pause, want active", got)
		}
	}
	if n := prodDS.delivered("p", held); n != 0 {
		t.Errorf("production's paused p delivered %d events", n)
	}

	// Every store has its deployment's events alone (the records stream
	// replicates within a deployment: both its gateways have them all).
	for _, c := range []struct {
		name        string
		gws         []*app.App
		own, others []string
	}{{"production", prod, prodOnly, stagingOnly}, {"staging", staging, stagingOnly, prodOnly}} {
		for i, g := range c.gws {
			for _, id := range c.own {
				gatewaytest.WaitFor(t, fmt.Sprintf("%s gateway %d to show %s", c.name, i, id), 30*time.Second, func() (bool, string) {
					_, _, _, found := eventOn(t, g, id)
					return found, ""
				})
			}
			for _, id := range c.others {
				if _, _, _, found := eventOn(t, g, id); found {
					t.Errorf("%s gateway %d holds the other deployment's event %s", c.name, i, id)
				}
			}
		}
	}
}
