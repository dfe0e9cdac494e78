package outbound_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/store"
)

type eventPage struct {
	Data       []store.EventSummary `json:"data"`
	NextCursor string               `json:"next_cursor"`
}

type eventDetail struct {
	store.EventSummary
	Headers      map[string]string `json:"headers"`
	Body         string            `json:"body"`
	BodyEncoding string            `json:"body_encoding"`
	Deliveries   []store.Delivery  `json:"deliveries"`
}

func (g *gateway) listAll(t *testing.T, query string, limit int) []string {
	t.Helper()
	var ids []string
	cursor := ""
	for page := 0; page < 100; page++ {
		code, body := g.api(t, http.MethodGet, fmt.Sprintf("/v1/events?limit=%d&cursor=%s&%s", limit, url.QueryEscape(cursor), query), apiToken)
		if code != 200 {
			t.Fatalf("list %s: %d %s", query, code, body)
		}
		var p eventPage
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			t.Fatal(err)
		}
		if len(p.Data) > limit {
			t.Fatalf("page of %d, limit %d", len(p.Data), limit)
		}
		for _, e := range p.Data {
			ids = append(ids, e.Source+"/"+e.EventID)
		}
		if p.NextCursor == "" {
			return ids
		}
		cursor = p.NextCursor
	}
	t.Fatal("paging does not end")
	return nil
}

func (g *gateway) event(t *testing.T, source, id string) eventDetail {
	t.Helper()
	code, body := g.api(t, http.MethodGet, "/v1/events/"+url.PathEscape(source)+"/"+url.PathEscape(id), apiToken)
	if code != 200 {
		t.Fatalf("get event %s/%s: %d %s", source, id, code, body)
	}
	var e eventDetail
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatal(err)
	}
	return e
}

func eventsConfig(t *testing.T, routes string) string {
	return fmt.Sprintf(`
listen: "127.0.0.1:0"
data_dir: %q
api: {tokens: [%q]}
sources:
  - {name: stripe, verify: stripe, secrets: [%q]}
  - {name: bin, verify: none, id_header: X-Id, type_header: X-Type}
routes:
%s`, t.TempDir(), apiToken, stripeSecret, routes)
}

// The event API lists events page by page with cursors, filtered by
// source, type and time; shows one event with its headers, body and
// deliveries; refuses bad parameters and missing tokens.
func TestEventAPIPaging(t *testing.T) {
	ds := newDownstream(t, nil)
	g := startGateway(t, eventsConfig(t, routeYAML("all", ds.URL+"/all", ", sources: [stripe, bin]")+
		routeYAML("invoices", ds.URL+"/invoices", `, events: ["invoice.*"]`)))
	start := time.Now().UTC()
	var want []string
	for i := 0; i < 7; i++ {
		typ := "invoice.paid"
		if i%2 == 1 {
			typ = "customer.created"
		}
		g.send(t, fmt.Sprintf("evt_%d", i), typ)
		want = append(want, fmt.Sprintf("stripe/evt_%d", i))
	}
	g.send(t, "evt/with slash?", "invoice.paid")
	want = append(want, "stripe/evt/with slash?")
	binBody := []byte{0xff, 0xfe, 0x00, 'h', 'i'}
	g.post(t, "bin", binBody, map[string]string{"X-Id": "b1", "X-Type": "blob", "Content-Type": "application/octet-stream"})
	want = append(want, "bin/b1")
	for _, id := range []string{"evt_0", "evt/with slash?"} {
		g.waitState(t, "all", "stripe", id, store.StateSucceeded)
		g.waitState(t, "invoices", "stripe", id, store.StateSucceeded)
	}
	g.waitState(t, "all", "bin", "b1", store.StateSucceeded)
	waitFor(t, "evt_0 marked published", func() (bool, string) {
		ev, err := g.Store().GetEvent(context.Background(), "stripe", "evt_0")
		return err == nil && !ev.PublishedAt.IsZero(), fmt.Sprint(err)
	})

	// A task's event is only for the task API, which scopes it to its token.
	if _, err := g.Store().Claim(context.Background(), &store.Event{Source: store.TaskSource, ID: "task_x", Type: "task",
		Body: []byte(`{"url":"http://x","headers":{"Authorization":"Bearer s3cr3t"}}`), ReceivedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if code, body := g.api(t, http.MethodGet, "/v1/events/_task/task_x", apiToken); code != 404 {
		t.Fatalf("task event through the event API: %d %s", code, body)
	}
	if code, body := g.api(t, http.MethodPost, "/v1/events/_task/task_x/replay", apiToken); code != 404 {
		t.Fatalf("task event replay through the event API: %d %s", code, body)
	}

	// Listed by (received_at in ms, source, event ID): events received in
	// one millisecond are in ID order.
	recv := map[string]int64{}
	for _, w := range want {
		src, id, _ := strings.Cut(w, "/")
		ev, err := g.Store().GetEvent(context.Background(), src, id)
		if err != nil {
			t.Fatal(err)
		}
		recv[w] = ev.ReceivedAt.UnixMilli()
	}
	slices.SortStableFunc(want, func(a, b string) int {
		if c := cmp.Compare(recv[a], recv[b]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})

	if code, _ := g.api(t, http.MethodGet, "/v1/events", ""); code != 401 {
		t.Fatalf("no token: %d, want 401", code)
	}
	for _, limit := range []int{1, 2, 4, 50} {
		if got := g.listAll(t, "", limit); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("limit %d: listed %v, want %v", limit, got, want)
		}
	}
	if got := g.listAll(t, "type=customer.created", 2); strings.Join(got, ",") != "stripe/evt_1,stripe/evt_3,stripe/evt_5" {
		t.Fatalf("by type: %v", got)
	}
	if got := g.listAll(t, "source=bin", 2); strings.Join(got, ",") != "bin/b1" {
		t.Fatalf("by source: %v", got)
	}
	since := url.QueryEscape(start.Add(-time.Minute).Format(time.RFC3339))
	if got := g.listAll(t, "since="+since, 3); len(got) != len(want) {
		t.Fatalf("since a minute ago: %v", got)
	}
	since = url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339))
	if got := g.listAll(t, "since="+since, 3); len(got) != 0 {
		t.Fatalf("since an hour ahead: %v", got)
	}
	for _, bad := range []string{"?since=yesterday", "?since=0001-01-01T00:00:00Z", "?limit=0", "?limit=501", "?cursor=zz", "?cursor=1-x"} {
		if code, body := g.api(t, http.MethodGet, "/v1/events"+bad, apiToken); code != 400 || !strings.Contains(body, "invalid_parameter") {
			t.Errorf("list%s: %d %s, want 400 invalid_parameter", bad, code, body)
		}
	}
	// A cursor of an earlier version (time-seq, local) is refused, saying so.
	if code, body := g.api(t, http.MethodGet, "/v1/events?cursor=1764130000123-17", apiToken); code != 400 ||
		!strings.Contains(body, "earlier hookgate version") {
		t.Errorf("an old cursor: %d %s, want 400 naming an earlier version", code, body)
	}

	e := g.event(t, "stripe", "evt_0")
	if e.Body != `{"id":"evt_0","type":"invoice.paid","data":{"n":1}}` || e.BodyEncoding != "utf8" ||
		e.EventType != "invoice.paid" || e.ContentType != "application/json" || e.Size != int64(len(e.Body)) ||
		e.PublishedAt.IsZero() || e.Headers["User-Agent"] == "" {
		t.Fatalf("event = %+v", e)
	}
	if len(e.Deliveries) != 2 {
		t.Fatalf("deliveries = %+v, want all and invoices", e.Deliveries)
	}
	for _, d := range e.Deliveries {
		if d.State != store.StateSucceeded || d.IdempotencyKey != outbound.IdempotencyKey(d.Route, "stripe", "evt_0") ||
			d.UID != store.DeliveryUID(d.Route, "stripe", "evt_0") {
			t.Fatalf("delivery %+v", d)
		}
	}
	if e := g.event(t, "stripe", "evt/with slash?"); e.EventID != "evt/with slash?" || len(e.Deliveries) != 2 {
		t.Fatalf("escaped ID: %+v", e)
	}
	e = g.event(t, "bin", "b1")
	if raw, err := base64.StdEncoding.DecodeString(e.Body); err != nil || !bytes.Equal(raw, binBody) || e.BodyEncoding != "base64" {
		t.Fatalf("binary body %q (%s): %v", e.Body, e.BodyEncoding, err)
	}
	if len(e.Deliveries) != 1 || e.Deliveries[0].Route != "all" {
		t.Fatalf("bin deliveries: %+v", e.Deliveries)
	}
	for _, p := range []string{"/v1/events/stripe/nope", "/v1/events/nope/evt_0"} {
		if code, body := g.api(t, http.MethodGet, p, apiToken); code != 404 || !strings.Contains(body, "not_found") {
			t.Errorf("%s: %d %s, want 404", p, code, body)
		}
	}
}

// Replay sends a delivered event again, with the same Idempotency-Keys, to
// the routes that take it now, or to the one route asked for; a route
// added to the configuration since gets a new delivery.
func TestEventReplay(t *testing.T) {
	ds := newDownstream(t, nil)
	g := startGateway(t, eventsConfig(t, routeYAML("all", ds.URL+"/all", "")+
		routeYAML("invoices", ds.URL+"/invoices", `, events: ["invoice.*"]`)+
		routeYAML("later", ds.URL+"/later", `, events: ["nothing.yet"]`)))
	g.send(t, "evt_inv", "invoice.paid")
	g.send(t, "evt_cus", "customer.created")
	g.waitState(t, "all", "stripe", "evt_inv", store.StateSucceeded)
	g.waitState(t, "invoices", "stripe", "evt_inv", store.StateSucceeded)
	g.waitState(t, "all", "stripe", "evt_cus", store.StateSucceeded)
	count := func(path, id string) int { return len(ds.succeeded()[path+" "+id]) }

	code, body := g.api(t, http.MethodPost, "/v1/events/stripe/evt_inv/replay", apiToken)
	if code != 202 {
		t.Fatalf("replay: %d %s", code, body)
	}
	var out struct {
		Deliveries []store.Delivery `json:"deliveries"`
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Deliveries) != 2 || out.Deliveries[0].State != store.StatePending {
		t.Fatalf("replay answered %+v, want 2 pending deliveries", out.Deliveries)
	}
	for _, d := range out.Deliveries {
		if d.UID != store.DeliveryUID(d.Route, "stripe", "evt_inv") {
			t.Fatalf("replay answered id %q for route %s, want its API ID", d.UID, d.Route)
		}
	}
	waitFor(t, "replayed to both routes", func() (bool, string) {
		return count("/all", "evt_inv") == 2 && count("/invoices", "evt_inv") == 2,
			fmt.Sprint(count("/all", "evt_inv"), count("/invoices", "evt_inv"))
	})
	for _, r := range []string{"all", "invoices"} {
		d := g.waitState(t, r, "stripe", "evt_inv", store.StateSucceeded)
		if d.Attempts != 2 {
			t.Errorf("%s: %d attempts after a replay, want 2", r, d.Attempts)
		}
		path := "/" + r
		reqs := ds.succeeded()[path+" evt_inv"]
		if reqs[0].key != reqs[1].key || reqs[1].key != outbound.IdempotencyKey(r, "stripe", "evt_inv") || reqs[1].attempt != "2" {
			t.Errorf("%s: replay key %q attempt %s, first key %q", r, reqs[1].key, reqs[1].attempt, reqs[0].key)
		}
	}

	// One route only.
	if code, body := g.api(t, http.MethodPost, "/v1/events/stripe/evt_inv/replay?route=invoices", apiToken); code != 202 ||
		strings.Count(body, `"route":`) != 1 {
		t.Fatalf("replay to one route: %d %s", code, body)
	}
	waitFor(t, "replayed to invoices", func() (bool, string) {
		return count("/invoices", "evt_inv") == 3, fmt.Sprint(count("/invoices", "evt_inv"))
	})
	if n := count("/all", "evt_inv"); n != 2 {
		t.Fatalf("route all got %d requests after a replay to invoices only", n)
	}

	// Refusals.
	for _, tt := range []struct {
		path string
		code int
		want string
	}{
		{"/v1/events/stripe/nope/replay", 404, "not_found"},
		{"/v1/events/stripe/evt_inv/replay?route=nope", 404, "unknown_route"},
		{"/v1/events/stripe/evt_cus/replay?route=invoices", 409, "no_matching_route"},
	} {
		if code, body := g.api(t, http.MethodPost, tt.path, apiToken); code != tt.code || !strings.Contains(body, tt.want) {
			t.Errorf("%s: %d %s, want %d %s", tt.path, code, body, tt.code, tt.want)
		}
	}
	if code, _ := g.api(t, http.MethodPost, "/v1/events/stripe/evt_inv/replay", ""); code != 401 {
		t.Fatalf("replay without a token: %d", code)
	}

	// A failed replay leaves a succeeded delivery succeeded.
	ds.mu.Lock()
	ds.respond = func(w http.ResponseWriter, r *http.Request, n int) int { w.WriteHeader(500); return 500 }
	ds.mu.Unlock()
	if code, body := g.api(t, http.MethodPost, "/v1/events/stripe/evt_cus/replay", apiToken); code != 202 {
		t.Fatalf("replay: %d %s", code, body)
	}
	waitFor(t, "failed replay recorded", func() (bool, string) {
		d := g.delivery(t, "all", "stripe", "evt_cus")
		return d != nil && d.State == store.StateSucceeded && d.LastStatus == 500 && d.Attempts > 1, fmt.Sprintf("%+v", d)
	})
	ds.mu.Lock()
	ds.respond = nil
	ds.mu.Unlock()

	// Route "later" now takes customer events: a replay creates its delivery.
	cfg := g.cfg
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfg.Routes[2].Events = []string{"customer.*"}
	g = restart(t, cfg)
	if d := g.delivery(t, "later", "stripe", "evt_cus"); d != nil {
		t.Fatalf("route later has a delivery before the replay: %+v", d)
	}
	code, body = g.api(t, http.MethodPost, "/v1/events/stripe/evt_cus/replay?route=later", apiToken)
	if code != 202 {
		t.Fatalf("replay to a new route: %d %s", code, body)
	}
	d := g.waitState(t, "later", "stripe", "evt_cus", store.StateSucceeded)
	if d.Attempts != 1 || count("/later", "evt_cus") != 1 ||
		ds.succeeded()["/later evt_cus"][0].key != outbound.IdempotencyKey("later", "stripe", "evt_cus") {
		t.Fatalf("new route delivery %+v", d)
	}
}

// A replay or retry cut short leaves its delivery pending, and the next
// start sends the event again: after a stop during the replay's request,
// and after a crash between the reset and the round (the delivery reset to
// pending, nothing recorded).
func TestUnfinishedReplayRunsAtNextStart(t *testing.T) {
	release := make(chan struct{})
	ds := newDownstream(t, func(w http.ResponseWriter, r *http.Request, n int) int {
		if n == 1 {
			<-release // the replay's request, held until the gateway stopped
		}
		w.WriteHeader(204)
		return 204
	})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	g := startGateway(t, eventsConfig(t, routeYAML("r", ds.URL, "")))
	cfg := g.cfg
	g.send(t, "evt_replayed", "invoice.paid")
	g.waitState(t, "r", "stripe", "evt_replayed", store.StateSucceeded)
	key := outbound.IdempotencyKey("r", "stripe", "evt_replayed")

	// Stopped during the replay's request.
	if code, body := g.api(t, http.MethodPost, "/v1/events/stripe/evt_replayed/replay", apiToken); code != 202 {
		t.Fatalf("replay: %d %s", code, body)
	}
	g = restartDuringHeldRequest(t, g, ds, cfg)
	waitFor(t, "the replay sent again after the restart", func() (bool, string) {
		return len(ds.requests()) == 3, fmt.Sprint(len(ds.requests()), " requests")
	})
	d := g.waitState(t, "r", "stripe", "evt_replayed", store.StateSucceeded)
	if d.Attempts != 3 {
		t.Errorf("attempts = %d, want 3 (the first delivery, the cut replay, the replay again)", d.Attempts)
	}
	if r := ds.requests()[2]; r.key != key || r.attempt != "3" {
		t.Errorf("request again: key %q attempt %s, want %q attempt 3", r.key, r.attempt, key)
	}

	// Died between the reset and the round.
	ev, err := g.Store().GetEvent(context.Background(), "stripe", "evt_replayed")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Store().ResetDelivery(context.Background(), &store.Delivery{EventSeq: ev.Seq, Route: "r", Source: "stripe",
		EventID: "evt_replayed", EventType: "invoice.paid", IdempotencyKey: key}, nil); err != nil {
		t.Fatal(err)
	}
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	g = restart(t, cfg)
	waitFor(t, "the reset delivery sent after the restart", func() (bool, string) {
		return len(ds.requests()) == 4, fmt.Sprint(len(ds.requests()), " requests")
	})
	if d := g.waitState(t, "r", "stripe", "evt_replayed", store.StateSucceeded); d.Attempts != 4 {
		t.Errorf("attempts = %d, want 4", d.Attempts)
	}
}

// restartDuringHeldRequest waits until ds holds a request, stops g with a
// short deadline (so the round is cut short) and starts it again.
func restartDuringHeldRequest(t *testing.T, g *gateway, ds *downstream, cfg *config.Config) *gateway {
	t.Helper()
	waitFor(t, "a request held by the downstream", func() (bool, string) {
		return ds.inflight.Load() == 1, fmt.Sprint(len(ds.requests()), " requests")
	})
	stopCtx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	g.Stop(stopCtx)
	return restart(t, cfg)
}

// retryHeldDownstream fails the two rounds of a schedule of one step,
// holds the third request (an operator's retry) until the test ends, and
// answers 204 after.
func retryHeldDownstream(t *testing.T) *downstream {
	release := make(chan struct{})
	ds := newDownstream(t, func(w http.ResponseWriter, r *http.Request, n int) int {
		switch {
		case n < 2: // both rounds of the schedule fail
			w.WriteHeader(500)
			return 500
		case n == 2: // the operator's retry, held until the gateway stopped
			<-release
		}
		w.WriteHeader(204)
		return 204
	})
	t.Cleanup(func() { close(release) })
	return ds
}

// An operator's retry of a dead delivery, cut short by a stop, runs again
// at the next start.
func TestUnfinishedRetryRunsAtNextStart(t *testing.T) {
	ds := retryHeldDownstream(t)
	g := startGateway(t, eventsConfig(t, routeYAML("r", ds.URL, ", retries: 0, schedule: [10ms]")))
	cfg := g.cfg
	g.send(t, "evt_retried", "invoice.paid")
	d := g.waitState(t, "r", "stripe", "evt_retried", store.StateDead)
	if code, body := g.api(t, http.MethodPost, "/v1/deliveries/"+d.UID+"/retry", apiToken); code != 202 {
		t.Fatalf("retry: %d %s", code, body)
	}
	g = restartDuringHeldRequest(t, g, ds, cfg)
	d = g.waitState(t, "r", "stripe", "evt_retried", store.StateSucceeded)
	reqs := ds.requests()
	if len(reqs) != 4 || d.Attempts != 4 || reqs[3].key != d.IdempotencyKey || reqs[3].attempt != "4" {
		t.Fatalf("after the restart: %d requests, delivery %+v, last request key %q attempt %s; want 4 requests, the 4th with the delivery's key",
			len(reqs), *d, reqs[len(reqs)-1].key, reqs[len(reqs)-1].attempt)
	}
}

// An operator's retry runs the delivery's own event, found by its seq, not
// another event with the same source and ID (one a provider sent again
// after retention pruned the first): a delivery whose event is gone is not
// found, and nothing is sent. (The delivery is route r2's, which does not
// take the event's type: a delivery's API ID is unique per (route,
// source, event ID).)
func TestRetryOfDeliveryWhoseEventIsGone(t *testing.T) {
	ds := newDownstream(t, nil)
	g := startGateway(t, baseConfig(t, routeYAML("r", ds.URL, "")+routeYAML("r2", ds.URL, ", events: [other.type]")))
	ctx := context.Background()
	g.send(t, "evt_again", "invoice.paid")
	g.waitState(t, "r", "stripe", "evt_again", store.StateSucceeded)
	ev, err := g.Store().GetEvent(ctx, "stripe", "evt_again")
	if err != nil {
		t.Fatal(err)
	}
	gone, err := g.Store().ResetDelivery(ctx, &store.Delivery{EventSeq: ev.Seq + 1000, Route: "r2", Source: "stripe",
		EventID: "evt_again", EventType: "invoice.paid", IdempotencyKey: "k"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := g.api(t, http.MethodPost, "/v1/deliveries/"+gone.UID+"/retry", apiToken); code != 404 {
		t.Fatalf("retry of a delivery whose event is gone: %d %s, want 404", code, body)
	}
	// A refused retry starts no round (Retry returns before it would).
	if n := len(ds.requests()); n != 1 {
		t.Fatalf("downstream got %d requests, want 1 (the event's own delivery)", n)
	}
	if d := g.delivery(t, "r", "stripe", "evt_again"); d.State != store.StateSucceeded || d.Attempts != 1 {
		t.Fatalf("the event's delivery = %+v, want succeeded after 1 attempt", *d)
	}
}

// An operator's retry cut short by a stop runs again at the next start
// even when that start comes inside the stream's duplicate window of the
// event's first message: the event put back in the outbox is a new
// message, not a duplicate JetStream drops (the route's consumer acked the
// first one long ago). With an external NATS the server's dedup ids
// outlive the gateway; with the embedded one those of messages still in
// the stream (limits retention here; under interest, another route yet
// to ack) are rebuilt at its start.
func TestUnfinishedRetryRunsAtNextStartInsideDuplicateWindow(t *testing.T) {
	for _, tc := range []struct {
		name string
		nats func(t *testing.T) string
	}{
		{"external NATS", func(t *testing.T) string {
			srv := gatewaytest.RunNATS(t, -1, t.TempDir())
			return fmt.Sprintf("nats: {url: %q, duplicate_window: 10m}\n", srv.ClientURL())
		}},
		{"embedded, limits retention", func(*testing.T) string {
			return "nats: {retention: limits, duplicate_window: 10m}\n"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := retryHeldDownstream(t)
			// The window is long so that the restart surely falls inside it.
			g := startGateway(t, eventsConfig(t, routeYAML("r", ds.URL, ", retries: 0, schedule: [10ms]"))+tc.nats(t))
			cfg := g.cfg
			g.send(t, "evt_retried", "invoice.paid")
			d := g.waitState(t, "r", "stripe", "evt_retried", store.StateDead)
			if code, body := g.api(t, http.MethodPost, "/v1/deliveries/"+d.UID+"/retry", apiToken); code != 202 {
				t.Fatalf("retry: %d %s", code, body)
			}
			g = restartDuringHeldRequest(t, g, ds, cfg)
			d = g.waitState(t, "r", "stripe", "evt_retried", store.StateSucceeded)
			reqs := ds.requests()
			if len(reqs) != 4 || d.Attempts != 4 || reqs[3].key != d.IdempotencyKey {
				t.Fatalf("after the restart: %d requests, delivery %+v; want 4 requests, the 4th with the delivery's key", len(reqs), *d)
			}
		})
	}
}
