package outbound_test

import (
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/stripe/stripe-go/v83/webhook"

	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/store"
)

// sendStripe posts a signed Stripe event with the given livemode field
// ("" leaves it out).
func (g *gateway) sendStripe(t *testing.T, id, livemode string) {
	t.Helper()
	field := ""
	if livemode != "" {
		field = `,"livemode":` + livemode
	}
	body := []byte(fmt.Sprintf(`{"id":%q,"object":"event","type":"invoice.paid"%s,"data":{"object":{"id":"in_1"}}}`, id, field))
	p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: stripeSecret})
	g.post(t, "stripe", body, map[string]string{"Stripe-Signature": p.Header})
}

// counter is the value of a counter of the gateway's registry with the
// label route ("": the counter without labels).
func (g *gateway) counter(t *testing.T, name, route string) float64 {
	t.Helper()
	mfs, err := g.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if route == "" && len(m.GetLabel()) == 0 {
				return m.GetCounter().GetValue()
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == "route" && l.GetValue() == route {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// A route that takes only live Stripe events: a test-mode event is never
// sent to it, but recorded filtered, counted, shown among the event's
// deliveries; another route without a filter still gets it. An event the
// filter cannot evaluate (no livemode field) is filtered and counted as
// an error. Replay and retry respect the filter.
func TestRouteFilter(t *testing.T) {
	ds := newDownstream(t, nil)
	g := startGateway(t, baseConfig(t,
		routeYAML("live", ds.URL+"/live", `, filter: "body.livemode"`)+
			routeYAML("all", ds.URL+"/all", "")))
	g.sendStripe(t, "evt_test", "false")
	g.sendStripe(t, "evt_live", "true")
	g.sendStripe(t, "evt_bare", "")

	g.waitState(t, "live", "stripe", "evt_live", store.StateSucceeded)
	for _, id := range []string{"evt_test", "evt_bare"} {
		d := g.waitState(t, "live", "stripe", id, store.StateFiltered)
		if d.Attempts != 0 {
			t.Errorf("%s: filtered with %d attempts", id, d.Attempts)
		}
		g.waitState(t, "all", "stripe", id, store.StateSucceeded)
	}
	g.waitState(t, "all", "stripe", "evt_live", store.StateSucceeded)
	if got := g.counter(t, "hookgate_route_filtered_total", "live"); got != 2 {
		t.Errorf("hookgate_route_filtered_total{route=live} = %v, want 2", got)
	}
	if got := g.counter(t, "hookgate_route_filter_errors_total", "live"); got != 1 {
		t.Errorf("hookgate_route_filter_errors_total{route=live} = %v, want 1", got)
	}
	if d := g.delivery(t, "live", "stripe", "evt_bare"); d.LastError == "" {
		t.Errorf("the filter's error is not on the delivery: %+v", d)
	}

	// Shown among the event's deliveries.
	ev := g.event(t, "stripe", "evt_test")
	states := map[string]string{}
	for _, d := range ev.Deliveries {
		states[d.Route] = d.State
	}
	if states["live"] != store.StateFiltered || states["all"] != store.StateSucceeded {
		t.Errorf("event deliveries: %v", states)
	}
	if code, body := g.api(t, http.MethodGet, "/v1/deliveries?state=filtered", apiToken); code != 200 {
		t.Errorf("list filtered deliveries: %d %s", code, body)
	}

	// A replay to the route and a retry of the filtered delivery are
	// filtered again, not sent.
	if code, body := g.api(t, http.MethodPost, "/v1/events/stripe/evt_test/replay?route=live", apiToken); code != 202 {
		t.Fatalf("replay: %d %s", code, body)
	}
	g.waitState(t, "live", "stripe", "evt_test", store.StateFiltered)
	d := g.delivery(t, "live", "stripe", "evt_bare")
	if code, body := g.api(t, http.MethodPost, fmt.Sprintf("/v1/deliveries/%d/retry", d.ID), apiToken); code != 202 {
		t.Fatalf("retry: %d %s", code, body)
	}
	waitFor(t, "filtered again", func() (bool, string) {
		return g.counter(t, "hookgate_route_filtered_total", "live") == 4, ""
	})
	g.waitState(t, "live", "stripe", "evt_bare", store.StateFiltered)

	var live []string
	for _, r := range ds.requests() {
		if r.path == "/live" {
			live = append(live, r.eventID)
		}
	}
	if !slices.Equal(live, []string{"evt_live"}) {
		t.Fatalf("route live was sent %v, want only evt_live", live)
	}
}

// An event identified by an id_expr is delivered under that ID: its
// X-Hookgate-Event-Id, and the Idempotency-Key derived from it; two
// callbacks of one job are two deliveries.
func TestIDExprDelivered(t *testing.T) {
	ds := newDownstream(t, nil)
	g := startGateway(t, fmt.Sprintf(`
listen: "127.0.0.1:0"
data_dir: %q
sources:
  - {name: jobs, verify: none, id_expr: 'body.job.id + ":" + body.status', type_expr: '"job." + body.status'}
routes:
  - {name: callbacks, sources: [jobs], url: %q, filter: 'type != "job.progress"'}
`, t.TempDir(), ds.URL+"/cb"))
	for _, st := range []string{"progress", "completed", "failed", "completed"} {
		g.post(t, "jobs", []byte(`{"job":{"id":"job_42"},"status":"`+st+`"}`), nil)
	}
	for _, id := range []string{"job_42:completed", "job_42:failed"} {
		g.waitState(t, "callbacks", "jobs", id, store.StateSucceeded)
	}
	g.waitState(t, "callbacks", "jobs", "job_42:progress", store.StateFiltered)
	got := map[string]string{}
	for _, r := range ds.requests() {
		got[r.eventID] = r.key
		if r.eventType != "job."+r.eventID[len("job_42:"):] {
			t.Errorf("%s: X-Hookgate-Event-Type %q", r.eventID, r.eventType)
		}
	}
	if len(got) != 2 {
		t.Fatalf("delivered %v, want job_42:completed and job_42:failed", got)
	}
	for id, key := range got {
		if key != outbound.IdempotencyKey("callbacks", "jobs", id) {
			t.Errorf("%s: Idempotency-Key %q is not derived from the ID", id, key)
		}
	}
}
