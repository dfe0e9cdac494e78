package outbound_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stripe/stripe-go/v83/webhook"

	"github.com/hookgate/hookgate/app"
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/store"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

const (
	stripeSecret = "whsec_outbound_test_stripe"
	routeSecret  = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	apiToken     = "test-token-0123456789abcdef"
)

// request is what a downstream saw.
type request struct {
	key, eventID, eventType, source, attempt, path string
	header                                         http.Header
	body                                           []byte
	status                                         int
}

// downstream is an httptest server that records every request and answers
// with respond (default 200).
type downstream struct {
	*httptest.Server
	mu       sync.Mutex
	reqs     []request
	respond  func(w http.ResponseWriter, r *http.Request, n int) int // returns the status it wrote
	inflight atomic.Int32
	peak     atomic.Int32
}

func newDownstream(t *testing.T, respond func(w http.ResponseWriter, r *http.Request, n int) int) *downstream {
	d := &downstream{respond: respond}
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cur := d.inflight.Add(1)
		defer d.inflight.Add(-1)
		for {
			p := d.peak.Load()
			if cur <= p || d.peak.CompareAndSwap(p, cur) {
				break
			}
		}
		body, _ := io.ReadAll(r.Body)
		d.mu.Lock()
		n := len(d.reqs)
		d.reqs = append(d.reqs, request{})
		d.mu.Unlock()
		status := 200
		d.mu.Lock()
		respond := d.respond
		d.mu.Unlock()
		if respond != nil {
			status = respond(w, r, n)
		} else {
			w.WriteHeader(200)
		}
		d.mu.Lock()
		d.reqs[n] = request{key: r.Header.Get("Idempotency-Key"), eventID: r.Header.Get("X-Hookgate-Event-Id"),
			eventType: r.Header.Get("X-Hookgate-Event-Type"), source: r.Header.Get("X-Hookgate-Source"),
			attempt: r.Header.Get("X-Hookgate-Attempt"), path: r.URL.Path, header: r.Header.Clone(), body: body, status: status}
		d.mu.Unlock()
	}))
	t.Cleanup(d.Close)
	return d
}

func (d *downstream) requests() []request {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]request(nil), d.reqs...)
}

// succeeded returns the requests answered 2xx, by event ID.
func (d *downstream) succeeded() map[string][]request {
	out := map[string][]request{}
	for _, r := range d.requests() {
		if r.status >= 200 && r.status < 300 {
			out[r.path+" "+r.eventID] = append(out[r.path+" "+r.eventID], r)
		}
	}
	return out
}

type gateway struct {
	*app.App
	cfg *config.Config
}

func startGateway(t *testing.T, yaml string) *gateway {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return restart(t, cfg)
}

// startGatewayB is startGateway for benchmarks.
func startGatewayB(b *testing.B, yaml string) *gateway {
	b.Helper()
	cfg, err := config.Parse([]byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		b.Fatalf("config: %v", err)
	}
	a := app.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := a.Start(context.Background()); err != nil {
		a.Stop(context.Background())
		b.Fatalf("start: %v", err)
	}
	b.Cleanup(func() { a.Stop(context.Background()) })
	return &gateway{App: a, cfg: cfg}
}

func restart(t *testing.T, cfg *config.Config) *gateway {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	a := app.New(cfg, log)
	if err := a.Start(context.Background()); err != nil {
		a.Stop(context.Background())
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { a.Stop(context.Background()) })
	return &gateway{App: a, cfg: cfg}
}

// baseConfig has a stripe source and a second source "other"; routes are
// appended by each test.
func baseConfig(t *testing.T, routes string) string {
	return fmt.Sprintf(`
listen: "127.0.0.1:0"
data_dir: %q
api: {tokens: [%q]}
sources:
  - {name: stripe, verify: stripe, secrets: [%q]}
  - {name: other, verify: none, id_field: id, type_field: type}
  - {name: lonely, verify: none, id_field: id}
routes:
%s`, t.TempDir(), apiToken, stripeSecret, routes)
}

func (g *gateway) send(t *testing.T, id, typ string) {
	t.Helper()
	body := []byte(fmt.Sprintf(`{"id":%q,"type":%q,"data":{"n":1}}`, id, typ))
	p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: stripeSecret})
	g.post(t, "stripe", body, map[string]string{"Stripe-Signature": p.Header})
}

func (g *gateway) post(t *testing.T, source string, body []byte, hdr map[string]string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+g.Addr()+"/webhooks/"+source, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("intake answered %d %s", resp.StatusCode, b)
	}
}

func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	gatewaytest.WaitFor(t, what, 30*time.Second, cond)
}

func (g *gateway) delivery(t *testing.T, route, source, id string) *store.Delivery {
	t.Helper()
	d, err := g.Store().Delivery(context.Background(), route, source, id)
	if err != nil {
		return nil
	}
	return d
}

func (g *gateway) waitState(t *testing.T, route, source, id, state string) *store.Delivery {
	t.Helper()
	var d *store.Delivery
	waitFor(t, fmt.Sprintf("%s/%s/%s %s", route, source, id, state), func() (bool, string) {
		d = g.delivery(t, route, source, id)
		if d == nil {
			return false, "no delivery"
		}
		return d.State == state, fmt.Sprintf("%+v", *d)
	})
	return d
}

// routeYAML is a route fed by stripe unless extra names its sources.
func routeYAML(name, url string, extra string) string {
	sources := "sources: [stripe], "
	if strings.Contains(extra, "sources:") {
		sources = ""
	}
	return fmt.Sprintf("  - {name: %s, %surl: %q, retry_wait_min: 5ms, retry_wait_max: 20ms%s}\n", name, sources, url, extra)
}

func TestRetriesThenSucceedsWithOneKey(t *testing.T) {
	ds := newDownstream(t, func(w http.ResponseWriter, r *http.Request, n int) int {
		if n < 4 {
			w.WriteHeader(500)
			return 500
		}
		w.WriteHeader(204)
		return 204
	})
	g := startGateway(t, baseConfig(t, routeYAML("billing", ds.URL+"/hook",
		fmt.Sprintf(", secret: %q, retries: 2, schedule: [20ms, 20ms, 20ms], headers: {X-Env: test}", routeSecret))))
	g.send(t, "evt_1", "invoice.paid")
	d := g.waitState(t, "billing", "stripe", "evt_1", store.StateSucceeded)

	reqs := ds.requests()
	if len(reqs) != 5 || d.Attempts != 5 || d.Rounds != 1 {
		t.Fatalf("requests = %d, delivery = %+v; want 5 requests, 5 attempts in 2 rounds", len(reqs), *d)
	}
	wh, err := standardwebhooks.NewWebhook(routeSecret)
	if err != nil {
		t.Fatal(err)
	}
	key := outbound.IdempotencyKey("billing", "stripe", "evt_1")
	for i, r := range reqs {
		if r.key != key || d.IdempotencyKey != key {
			t.Errorf("request %d key %q, stored %q, want %q", i, r.key, d.IdempotencyKey, key)
		}
		if r.attempt != strconv.Itoa(i+1) {
			t.Errorf("request %d X-Hookgate-Attempt = %q, want %d", i, r.attempt, i+1)
		}
		if err := wh.Verify(r.body, r.header); err != nil {
			t.Errorf("request %d: signature does not verify with the Standard Webhooks library: %v", i, err)
		}
		if r.header.Get("webhook-id") != key || r.header.Get("X-Env") != "test" ||
			r.header.Get("Content-Type") != "application/json" || !strings.HasPrefix(r.header.Get("User-Agent"), "hookgate/") ||
			r.source != "stripe" || r.eventType != "invoice.paid" {
			t.Errorf("request %d headers = %v", i, r.header)
		}
		if !bytes.Equal(r.body, []byte(`{"id":"evt_1","type":"invoice.paid","data":{"n":1}}`)) {
			t.Errorf("request %d body = %s", i, r.body)
		}
	}
	if n := len(ds.succeeded()); n != 1 {
		t.Fatalf("downstream got %d successful deliveries, want 1", n)
	}
	as, err := g.Store().Attempts(context.Background(), d.ID)
	if err != nil || len(as) != 5 || as[0].Status != 500 || as[4].Status != 204 {
		t.Fatalf("attempts = %+v, %v", as, err)
	}
}

func TestFanOutGlobsAndUnroutedSource(t *testing.T) {
	ds := newDownstream(t, nil)
	g := startGateway(t, baseConfig(t,
		routeYAML("invoices", ds.URL+"/invoices", `, events: ["invoice.*"]`)+
			routeYAML("all", ds.URL+"/all", `, sources: [stripe, other]`)+
			routeYAML("subs", ds.URL+"/subs", `, events: ["customer.*.updated"]`)))
	g.send(t, "evt_inv", "invoice.payment.failed")
	g.send(t, "evt_cus", "customer.created")
	g.send(t, "evt_sub", "customer.subscription.updated")
	g.post(t, "other", []byte(`{"id":"o1","type":"x"}`), nil)
	g.post(t, "lonely", []byte(`{"id":"l1"}`), nil)

	want := []string{"/invoices evt_inv", "/all evt_inv", "/all evt_cus", "/all evt_sub", "/subs evt_sub", "/all o1"}
	waitFor(t, "fan-out", func() (bool, string) {
		got := ds.succeeded()
		for _, w := range want {
			if len(got[w]) == 0 {
				return false, fmt.Sprintf("missing %s in %v", w, got)
			}
		}
		return true, ""
	})
	got := ds.succeeded()
	if len(got) != len(want) {
		t.Fatalf("deliveries = %d (%v), want %d", len(got), got, len(want))
	}
	if a, b := got["/invoices evt_inv"][0].key, got["/all evt_inv"][0].key; a == b {
		t.Fatalf("two routes share the key %q", a)
	}
	if a, b := got["/all evt_inv"][0].key, got["/all evt_cus"][0].key; a == b {
		t.Fatalf("two events share the key %q", a)
	}
	if d := g.delivery(t, "all", "lonely", "l1"); d != nil {
		t.Fatalf("a source feeding no route was delivered: %+v", d)
	}
}

func TestFailures(t *testing.T) {
	var gone, slow, redirect, throttled, failing atomic.Int32
	ds := newDownstream(t, func(w http.ResponseWriter, r *http.Request, n int) int {
		switch r.URL.Path {
		case "/gone":
			gone.Add(1)
			w.WriteHeader(410)
			return 410
		case "/slow":
			if slow.Add(1) == 1 {
				time.Sleep(300 * time.Millisecond) // past the 100ms timeout
				return 0
			}
		case "/redirect":
			if redirect.Add(1) == 1 {
				http.Redirect(w, r, "/elsewhere", http.StatusFound)
				return 302
			}
		case "/elsewhere":
			t.Errorf("a redirect was followed")
		case "/throttled":
			if throttled.Add(1) == 1 {
				w.Header().Set("Retry-After", "3600")
				w.WriteHeader(429)
				return 429
			}
		case "/failing":
			failing.Add(1)
			w.WriteHeader(503)
			return 503
		}
		w.WriteHeader(200)
		return 200
	})
	g := startGateway(t, baseConfig(t,
		routeYAML("gone", ds.URL+"/gone", ", retries: 3")+
			routeYAML("slow", ds.URL+"/slow", ", timeout: 100ms, retries: 1")+
			routeYAML("redirect", ds.URL+"/redirect", ", retries: 1")+
			routeYAML("throttled", ds.URL+"/throttled", ", retries: 1")+
			routeYAML("failing", ds.URL+"/failing", ", retries: 1, schedule: [10ms, 10ms]")))
	g.send(t, "evt_f", "invoice.paid")

	d := g.waitState(t, "gone", "stripe", "evt_f", store.StateDead)
	if d.Attempts != 1 || gone.Load() != 1 || d.LastStatus != 410 {
		t.Errorf("410: delivery %+v after %d requests; want dead after 1", *d, gone.Load())
	}
	d = g.waitState(t, "slow", "stripe", "evt_f", store.StateSucceeded)
	if d.Attempts != 2 {
		t.Errorf("timeout: %d attempts, want 2", d.Attempts)
	}
	as, _ := g.Store().Attempts(context.Background(), d.ID)
	if len(as) != 2 || as[0].Status != 0 || !strings.Contains(as[0].Error, "Timeout") {
		t.Errorf("timeout attempt recorded as %+v", as)
	}
	d = g.waitState(t, "redirect", "stripe", "evt_f", store.StateSucceeded)
	if d.Attempts != 2 {
		t.Errorf("redirect: %d attempts, want 2", d.Attempts)
	}
	as, _ = g.Store().Attempts(context.Background(), d.ID)
	if len(as) != 2 || as[0].Status != 302 || !strings.Contains(as[0].Error, "redirect") {
		t.Errorf("redirect attempt recorded as %+v", as)
	}
	// Retry-After: 3600 is capped at retry_wait_max (20ms): the retry comes
	// within the round, not in an hour.
	d = g.waitState(t, "throttled", "stripe", "evt_f", store.StateSucceeded)
	if d.Attempts != 2 || d.Rounds != 0 {
		t.Errorf("429: delivery %+v, want success on the 2nd attempt of the first round", *d)
	}
	// The schedule (2 steps) exhausts: 3 rounds of 2 attempts, then dead.
	d = g.waitState(t, "failing", "stripe", "evt_f", store.StateDead)
	if d.Attempts != 6 || d.Rounds != 3 || failing.Load() != 6 || d.LastStatus != 503 {
		t.Errorf("exhausted: delivery %+v after %d requests; want dead after 3 rounds, 6 attempts", *d, failing.Load())
	}

	// An operator retries the dead delivery through the API: it succeeds,
	// with the same key.
	ds.mu.Lock()
	ds.respond = nil
	ds.mu.Unlock()
	code, body := g.api(t, http.MethodPost, "/v1/deliveries/"+d.UID+"/retry", apiToken)
	if code != 202 || !strings.Contains(body, `"id":"`+d.UID+`"`) {
		t.Fatalf("retry answered %d %s", code, body)
	}
	d2 := g.waitState(t, "failing", "stripe", "evt_f", store.StateSucceeded)
	reqs := ds.requests()
	last := reqs[len(reqs)-1]
	if last.key != d.IdempotencyKey || d2.Attempts != 7 || last.attempt != "7" {
		t.Fatalf("manual retry: key %q attempt %s (delivery %+v), want key %q, attempt 7", last.key, last.attempt, *d2, d.IdempotencyKey)
	}
	if code, body := g.api(t, http.MethodPost, "/v1/deliveries/"+d.UID+"/retry", apiToken); code != 409 {
		t.Fatalf("retry of a succeeded delivery answered %d %s, want 409", code, body)
	}
	// A single gateway still takes the row number earlier versions showed.
	if code, body := g.api(t, http.MethodPost, fmt.Sprintf("/v1/deliveries/%d/retry", d.ID), apiToken); code != 409 {
		t.Fatalf("retry by row number of a succeeded delivery answered %d %s, want 409", code, body)
	}
}

func (g *gateway) api(t *testing.T, method, path, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+g.Addr()+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestOperatorAPI(t *testing.T) {
	ds := newDownstream(t, nil)
	g := startGateway(t, baseConfig(t, routeYAML("r1", ds.URL+"/r1", "")+routeYAML("r2", ds.URL+"/r2", "")))
	for i := 0; i < 5; i++ {
		g.send(t, fmt.Sprintf("evt_%d", i), "invoice.paid")
	}
	for i := 0; i < 5; i++ {
		for _, r := range []string{"r1", "r2"} {
			g.waitState(t, r, "stripe", fmt.Sprintf("evt_%d", i), store.StateSucceeded)
		}
	}
	if code, _ := g.api(t, http.MethodGet, "/v1/deliveries", ""); code != 401 {
		t.Fatalf("no token: %d, want 401", code)
	}
	if code, _ := g.api(t, http.MethodGet, "/v1/deliveries", "wrong-token-0123456789"); code != 401 {
		t.Fatalf("wrong token: %d, want 401", code)
	}
	// Page through r1's deliveries two at a time: their IDs are the API's
	// (dl_…, derived from route, source and event ID), in (created_at, id)
	// order.
	var ids, evIDs []string
	var created []time.Time
	cursor := ""
	for page := 0; page < 5; page++ {
		code, body := g.api(t, http.MethodGet, "/v1/deliveries?route=r1&state=succeeded&limit=2&cursor="+cursor, apiToken)
		if code != 200 {
			t.Fatalf("list: %d %s", code, body)
		}
		var out struct {
			Data       []store.Delivery `json:"data"`
			NextCursor string           `json:"next_cursor"`
		}
		if err := json.Unmarshal([]byte(body), &out); err != nil {
			t.Fatal(err)
		}
		for _, d := range out.Data {
			if d.Route != "r1" || d.State != "succeeded" || d.Attempts != 1 || d.LastStatus != 200 {
				t.Fatalf("listed %+v", d)
			}
			ids = append(ids, d.UID)
			evIDs = append(evIDs, d.EventID)
			created = append(created, d.CreatedAt)
			if d.ID != 0 || d.UID != store.DeliveryUID("r1", "stripe", d.EventID) {
				t.Fatalf("listed id %q (row %d), want %s", d.UID, d.ID, store.DeliveryUID("r1", "stripe", d.EventID))
			}
		}
		if out.NextCursor == "" {
			break
		}
		cursor = out.NextCursor
	}
	if len(ids) != 5 {
		t.Fatalf("paged through %d deliveries, want 5", len(ids))
	}
	for i := 1; i < len(ids); i++ {
		// One route and source: (created_at, event ID) order.
		if c := created[i].Compare(created[i-1]); c < 0 || (c == 0 && evIDs[i] < evIDs[i-1]) {
			t.Fatalf("listed out of (created_at, source, event ID, route) order: %v %v", evIDs, created)
		}
	}
	code, body := g.api(t, http.MethodGet, "/v1/deliveries/"+ids[0], apiToken)
	if code != 200 || !strings.Contains(body, `"attempt_list":[{"attempt":1`) || !strings.Contains(body, `"idempotency_key":"hg_`) ||
		!strings.Contains(body, `"id":"`+ids[0]+`"`) {
		t.Fatalf("get: %d %s", code, body)
	}
	// A single gateway still takes the row number earlier versions showed.
	d := g.delivery(t, "r1", "stripe", "evt_0")
	if code, body := g.api(t, http.MethodGet, fmt.Sprintf("/v1/deliveries/%d", d.ID), apiToken); code != 200 ||
		!strings.Contains(body, `"id":"`+d.UID+`"`) {
		t.Fatalf("get by row number %d: %d %s", d.ID, code, body)
	}
	for _, bad := range []string{"?state=nope", "?limit=0", "?limit=abc", "?cursor=x", "?cursor=RA"} {
		if code, body := g.api(t, http.MethodGet, "/v1/deliveries"+bad, apiToken); code != 400 || !strings.Contains(body, "invalid_parameter") {
			t.Errorf("list%s: %d %s, want 400 invalid_parameter", bad, code, body)
		}
	}
	// A cursor of an earlier version (a row number) is refused, saying so.
	if code, body := g.api(t, http.MethodGet, "/v1/deliveries?cursor=12", apiToken); code != 400 ||
		!strings.Contains(body, "earlier hookgate version") {
		t.Errorf("an old cursor: %d %s, want 400 naming an earlier version", code, body)
	}
	for _, missing := range []string{"99999", store.DeliveryUID("r3", "stripe", "evt_0"), "dl_x", "x", "-1"} {
		if code, _ := g.api(t, http.MethodGet, "/v1/deliveries/"+missing, apiToken); code != 404 {
			t.Fatalf("missing delivery %s: %d, want 404", missing, code)
		}
	}
}

func TestConcurrencyAndRateLimits(t *testing.T) {
	release := make(chan struct{})
	ds := newDownstream(t, func(w http.ResponseWriter, r *http.Request, n int) int {
		if r.URL.Path == "/narrow" {
			<-release
		}
		w.WriteHeader(200)
		return 200
	})
	g := startGateway(t, baseConfig(t,
		routeYAML("narrow", ds.URL+"/narrow", ", concurrency: 3, events: [narrow]")+
			routeYAML("slowrate", ds.URL+"/rate", ", rate: 20, concurrency: 8, events: [rate]")))
	for i := 0; i < 12; i++ {
		g.send(t, fmt.Sprintf("evt_n%d", i), "narrow")
	}
	waitFor(t, "3 requests in flight", func() (bool, string) {
		return ds.inflight.Load() == 3, fmt.Sprint(ds.inflight.Load())
	})
	close(release)
	waitFor(t, "narrow deliveries", func() (bool, string) {
		n := len(ds.succeeded())
		return n == 12, fmt.Sprint(n)
	})
	if p := ds.peak.Load(); p != 3 {
		t.Fatalf("peak concurrency = %d, want 3", p)
	}

	// rate 20/s with a burst of 20: 60 requests cannot finish before
	// (60-20)/20 = 2s after the first.
	start := time.Now()
	for i := 0; i < 60; i++ {
		g.send(t, fmt.Sprintf("evt_r%d", i), "rate")
	}
	waitFor(t, "rate deliveries", func() (bool, string) {
		n := len(ds.succeeded())
		return n == 72, fmt.Sprint(n)
	})
	if el := time.Since(start); el < 2*time.Second-50*time.Millisecond {
		t.Fatalf("60 requests at rate 20/s took %s, want at least 2s", el)
	}
}

// The JetStream store wiped while the gateway is stopped: every event not yet
// delivered is published again and delivered; delivered ones are not resent.
func TestStreamWipedWhileStopped(t *testing.T) {
	var up atomic.Bool
	ds := newDownstream(t, func(w http.ResponseWriter, r *http.Request, n int) int {
		if !up.Load() && !strings.Contains(r.Header.Get("X-Hookgate-Event-Id"), "early") {
			w.WriteHeader(503)
			return 503
		}
		w.WriteHeader(200)
		return 200
	})
	// A failed round is retried 2s later; the wipe happens well before.
	g := startGateway(t, baseConfig(t, routeYAML("r", ds.URL, ", retries: 0, schedule: [2s, 2s]")))
	g.send(t, "evt_early", "a")
	g.waitState(t, "r", "stripe", "evt_early", store.StateSucceeded)
	for i := 0; i < 5; i++ {
		g.send(t, fmt.Sprintf("evt_%d", i), "a")
		g.waitState(t, "r", "stripe", fmt.Sprintf("evt_%d", i), store.StateRetrying)
	}
	g = restartWiped(t, g, &up)
	for i := 0; i < 5; i++ {
		g.waitState(t, "r", "stripe", fmt.Sprintf("evt_%d", i), store.StateSucceeded)
	}
	if n := len(ds.succeeded()["/ evt_early"]); n != 1 {
		t.Fatalf("the delivered event was sent %d times, want 1", n)
	}
}

// On a wiped stream only events some route still owes are published
// again: not those every matching route finished, nor those a route's
// event filter leaves out.
func TestStreamWipedRepublishesOnlyOwed(t *testing.T) {
	var up atomic.Bool
	inv := newDownstream(t, func(w http.ResponseWriter, r *http.Request, n int) int {
		if !up.Load() {
			w.WriteHeader(503)
			return 503
		}
		w.WriteHeader(200)
		return 200
	})
	all := newDownstream(t, func(w http.ResponseWriter, r *http.Request, n int) int {
		w.WriteHeader(200)
		return 200
	})
	g := startGateway(t, baseConfig(t, routeYAML("inv", inv.URL, `, events: ["invoice.*"], retries: 0, schedule: [2s, 2s]`)+
		routeYAML("all", all.URL, "")))
	g.send(t, "evt_inv", "invoice.paid")
	g.send(t, "evt_cus", "customer.created")
	g.waitState(t, "inv", "stripe", "evt_inv", store.StateRetrying)
	g.waitState(t, "all", "stripe", "evt_inv", store.StateSucceeded)
	g.waitState(t, "all", "stripe", "evt_cus", store.StateSucceeded)
	published := func(id string) time.Time {
		t.Helper()
		ev, err := g.Store().GetEvent(context.Background(), "stripe", id)
		if err != nil {
			t.Fatal(err)
		}
		return ev.PublishedAt
	}
	before := map[string]time.Time{"evt_inv": published("evt_inv"), "evt_cus": published("evt_cus")}
	g = restartWiped(t, g, &up)
	g.waitState(t, "inv", "stripe", "evt_inv", store.StateSucceeded)
	if got := published("evt_inv"); got.Equal(before["evt_inv"]) {
		t.Error("evt_inv, owed to inv, was not published again")
	}
	if got := published("evt_cus"); !got.Equal(before["evt_cus"]) {
		t.Errorf("evt_cus was published again at %v (first at %v): all finished it, inv does not take it", got, before["evt_cus"])
	}
	if d := g.delivery(t, "inv", "stripe", "evt_cus"); d != nil {
		t.Errorf("inv has a delivery of a customer event: %+v", d)
	}
	for id, reqs := range all.succeeded() {
		if len(reqs) != 1 {
			t.Errorf("all: %s delivered %d times, want 1", id, len(reqs))
		}
	}
}

// restartWiped stops g, wipes its JetStream store, sets up (the
// downstream answers from now on) and starts the gateway again.
func restartWiped(t *testing.T, g *gateway, up *atomic.Bool) *gateway {
	t.Helper()
	cfg := g.cfg
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(cfg.NATS.StoreDir); err != nil {
		t.Fatal(err)
	}
	up.Store(true)
	return restart(t, cfg)
}

// TestIdempotencyKeyStable pins the key derivation: downstreams dedup on
// keys already sent, so a change here would make them run effects twice.
func TestIdempotencyKeyStable(t *testing.T) {
	long := strings.Repeat("r", 300) // longer than the stack buffer
	for _, c := range []struct{ route, source, id, want string }{
		{"billing", "stripe", "evt_1", "hg_aaa8abe84c2fc2f338aef570a8c4268c"},
		{"", "", "", "hg_63cab8e921e413242a44bf4e8fdc999d"},
		{"a:b", "1:", "ünïcode/évt", "hg_0fe4e335cc0453f72dbec0ae1075353e"},
	} {
		if got := outbound.IdempotencyKey(c.route, c.source, c.id); got != c.want {
			t.Errorf("IdempotencyKey(%q, %q, %q) = %s, want %s", c.route, c.source, c.id, got, c.want)
		}
	}
	sum := sha256.Sum256([]byte(fmt.Sprintf("%d:%s%d:%s%d:%s", len(long), long, 6, "stripe", 5, "evt_1")))
	if got, want := outbound.IdempotencyKey(long, "stripe", "evt_1"), "hg_"+hex.EncodeToString(sum[:16]); got != want {
		t.Errorf("long route: got %s, want %s", got, want)
	}
}
