package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/stripe/stripe-go/v83/webhook"

	"github.com/hookgate/hookgate/admin"
)

// specChecker sends requests to a running gateway and validates each
// request (when it is meant to be valid) and every answer against the
// served OpenAPI description, recording the operations exercised.
type specChecker struct {
	t       *testing.T
	base    string
	v       validator.Validator
	covered map[string]map[int]bool // "METHOD /template" -> statuses seen
}

type call struct {
	op      string // "METHOD /template", as in the description
	path    string // the real path and query
	auth    string
	headers map[string]string
	body    string
	want    int
}

func (s *specChecker) do(c call) map[string]any {
	s.t.Helper()
	method, _, _ := strings.Cut(c.op, " ")
	req, _ := http.NewRequest(method, s.base+c.path, strings.NewReader(c.body))
	if c.auth != "" {
		req.Header.Set("Authorization", "Bearer "+c.auth)
	}
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range c.headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, c.path, err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != c.want {
		s.t.Fatalf("%s %s: %d %s, want %d", method, c.path, resp.StatusCode, raw, c.want)
	}
	// The validator reads the bodies again.
	vreq, _ := http.NewRequest(method, s.base+c.path, strings.NewReader(c.body))
	vreq.Header = req.Header.Clone()
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	if c.want < 300 {
		if ok, errs := s.v.ValidateHttpRequestResponse(vreq, resp); !ok {
			s.t.Errorf("%s %s (%d) does not match the description:\n%s", method, c.path, resp.StatusCode, validationErrors(errs))
		}
	} else if ok, errs := s.v.ValidateHttpResponse(vreq, resp); !ok {
		s.t.Errorf("%s %s: the %d answer does not match the description:\n%s", method, c.path, resp.StatusCode, validationErrors(errs))
	}
	if s.covered[c.op] == nil {
		s.covered[c.op] = map[int]bool{}
	}
	s.covered[c.op][resp.StatusCode] = true
	var out map[string]any
	json.Unmarshal(raw, &out)
	return out
}

func validationErrors[E error](errs []E) string {
	var b strings.Builder
	for _, e := range errs {
		b.WriteString("  " + e.Error() + "\n")
	}
	return b.String()
}

// specOps are the operations the description declares.
func specOps(t *testing.T, spec []byte) []string {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(spec, &doc); err != nil {
		t.Fatal(err)
	}
	var ops []string
	for p, item := range doc.Paths {
		for m := range item {
			ops = append(ops, strings.ToUpper(m)+" "+p)
		}
	}
	slices.Sort(ops)
	return ops
}

var fiberParam = regexp.MustCompile(`:([a-z_]+)`)

// Every endpoint the router serves is in the OpenAPI description and the
// description has nothing the router does not serve; every operation is
// exercised over real HTTP, its success and its errors, and each request
// and answer is validated against the description
// (pb33f/libopenapi-validator), so the description cannot drift.
func TestOpenAPIDescribesEveryEndpoint(t *testing.T) {
	ds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/gone" {
			w.WriteHeader(http.StatusGone) // dead at once
		}
	}))
	defer ds.Close()
	const taskToken, metricsToken = "tok_openapi_task_0123456789", "tok_openapi_metrics_0123456789"
	a := startApp(t, testConfig(t, fmt.Sprintf(`
  - {name: plain, verify: none, id_field: id}
api: {tokens: [%q]}
metrics: {token: %q}
routes:
  - {name: ok, sources: [stripe], url: %q}
  - {name: gone, sources: [stripe], url: %q, retries: 0}
  - {name: other, sources: [plain], url: %q}
  - {name: picky, sources: [stripe], url: %q, filter: "body.type == 'never'"}
tasks: {tokens: [%q], allow: [127.0.0.1]}
`, apiToken, metricsToken, ds.URL+"/ok", ds.URL+"/gone", ds.URL+"/other", ds.URL+"/picky", taskToken)))

	spec := admin.OpenAPI()
	doc, err := libopenapi.NewDocument(spec)
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("the description does not build: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		t.Fatalf("the description is not valid OpenAPI:\n%s", validationErrors(verrs))
	}
	s := &specChecker{t: t, base: "http://" + a.Addr(), v: v, covered: map[string]map[int]bool{}}

	// The router's routes and the description's operations are the same.
	declared := specOps(t, spec)
	var served []string
	for _, r := range a.http.GetRoutes(true) {
		if r.Method == http.MethodHead || strings.HasPrefix(r.Path, "/console") {
			continue // fiber serves HEAD beside every GET; the console is pages, not API
		}
		served = append(served, r.Method+" "+fiberParam.ReplaceAllString(r.Path, "{$1}"))
	}
	slices.Sort(served)
	served = slices.Compact(served)
	for _, op := range served {
		if !slices.Contains(declared, op) {
			t.Errorf("%s is served but not in admin/openapi.json", op)
		}
	}
	for _, op := range declared {
		if !slices.Contains(served, op) {
			t.Errorf("%s is in admin/openapi.json but not served", op)
		}
	}

	op := apiToken
	s.do(call{op: "GET /v1/openapi.json", path: "/v1/openapi.json", want: 200})

	// Intake.
	body := `{"id":"evt_spec_1","type":"invoice.paid"}`
	sig := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(body), Secret: secret})
	s.do(call{op: "POST /webhooks/{source}", path: "/webhooks/stripe", body: body,
		headers: map[string]string{"Stripe-Signature": sig.Header}, want: 200})
	s.do(call{op: "POST /webhooks/{source}", path: "/webhooks/stripe", body: body, want: 401})
	s.do(call{op: "POST /webhooks/{source}", path: "/webhooks/nope", body: body, want: 404})
	s.do(call{op: "POST /webhooks/{source}", path: "/webhooks/plain", body: `{"id":"p1"}`, want: 200})

	var okID, goneID, pickyID string
	waitFor(t, "the event delivered to ok, dead on gone, filtered on picky", func() (bool, string) {
		l := s.do(call{op: "GET /v1/deliveries", path: "/v1/deliveries?source=stripe&limit=10", auth: op, want: 200})
		data, _ := l["data"].([]any)
		for _, d := range data {
			m, _ := d.(map[string]any)
			switch {
			case m["route"] == "ok" && m["state"] == "succeeded":
				okID, _ = m["id"].(string)
			case m["route"] == "gone" && m["state"] == "dead":
				goneID, _ = m["id"].(string)
			case m["route"] == "picky" && m["state"] == "filtered":
				pickyID, _ = m["id"].(string)
			}
		}
		return okID != "" && goneID != "" && pickyID != "", fmt.Sprint(data)
	})

	// Deliveries.
	s.do(call{op: "GET /v1/deliveries", path: "/v1/deliveries?state=filtered", auth: op, want: 200})
	s.do(call{op: "GET /v1/deliveries", path: "/v1/deliveries?state=bogus", auth: op, want: 400})
	s.do(call{op: "GET /v1/deliveries", path: "/v1/deliveries", want: 401})
	s.do(call{op: "GET /v1/deliveries/{id}", path: "/v1/deliveries/" + goneID, auth: op, want: 200})
	s.do(call{op: "GET /v1/deliveries/{id}", path: "/v1/deliveries/dl_nope", auth: op, want: 404})
	s.do(call{op: "POST /v1/deliveries/{id}/retry", path: "/v1/deliveries/" + goneID + "/retry", auth: op, want: 202})
	s.do(call{op: "POST /v1/deliveries/{id}/retry", path: "/v1/deliveries/" + okID + "/retry", auth: op, want: 409})
	s.do(call{op: "POST /v1/deliveries/{id}/retry", path: "/v1/deliveries/dl_nope/retry", auth: op, want: 404})
	s.do(call{op: "POST /v1/deliveries/retry", path: "/v1/deliveries/retry", auth: op, body: `{"route":"gone"}`, want: 202})
	s.do(call{op: "POST /v1/deliveries/retry", path: "/v1/deliveries/retry", auth: op, body: `{"rout":"gone"}`, want: 400})
	s.do(call{op: "POST /v1/deliveries/retry", path: "/v1/deliveries/retry", auth: taskToken, body: `{"route":"gone"}`, want: 403})
	s.do(call{op: "POST /v1/deliveries/retry", path: "/v1/deliveries/retry", auth: op,
		body: `{"route":"` + strings.Repeat("r", 5000) + `"}`, want: 413})

	// Events.
	s.do(call{op: "GET /v1/events", path: "/v1/events?source=stripe&limit=5", auth: op, want: 200})
	s.do(call{op: "GET /v1/events", path: "/v1/events?since=yesterday", auth: op, want: 400})
	s.do(call{op: "GET /v1/events", path: "/v1/events", auth: taskToken, want: 403})
	s.do(call{op: "GET /v1/events/{source}/{event_id}", path: "/v1/events/stripe/evt_spec_1", auth: op, want: 200})
	s.do(call{op: "GET /v1/events/{source}/{event_id}", path: "/v1/events/stripe/" + url.PathEscape("no such/event"), auth: op, want: 404})
	s.do(call{op: "POST /v1/events/{source}/{event_id}/replay", path: "/v1/events/stripe/evt_spec_1/replay?route=ok", auth: op, want: 202})
	s.do(call{op: "POST /v1/events/{source}/{event_id}/replay", path: "/v1/events/stripe/evt_spec_1/replay?route=nope", auth: op, want: 404})
	s.do(call{op: "POST /v1/events/{source}/{event_id}/replay", path: "/v1/events/stripe/evt_spec_1/replay?route=other", auth: op, want: 409})

	// The outbox's parked events.
	s.do(call{op: "GET /v1/outbox/parked", path: "/v1/outbox/parked?limit=10", auth: op, want: 200})
	s.do(call{op: "GET /v1/outbox/parked", path: "/v1/outbox/parked?cursor=x", auth: op, want: 400})
	s.do(call{op: "POST /v1/outbox/parked/{seq}/requeue", path: "/v1/outbox/parked/999/requeue", auth: op, want: 404})

	// Routes.
	s.do(call{op: "GET /v1/routes", path: "/v1/routes", auth: op, want: 200})
	s.do(call{op: "GET /v1/routes", path: "/v1/routes", auth: taskToken, want: 403})
	s.do(call{op: "POST /v1/routes/{name}/pause", path: "/v1/routes/other/pause", auth: op, want: 200})
	s.do(call{op: "POST /v1/routes/{name}/pause", path: "/v1/routes/nope/pause", auth: op, want: 404})
	s.do(call{op: "POST /v1/routes/{name}/resume", path: "/v1/routes/other/resume", auth: op, want: 200})
	s.do(call{op: "POST /v1/routes/{name}/resume", path: "/v1/routes/nope/resume", auth: taskToken, want: 403})

	// Tasks.
	task := s.do(call{op: "POST /v1/tasks", path: "/v1/tasks", auth: taskToken, body: fmt.Sprintf(`{"url":%q,"body":{"k":1}}`, ds.URL+"/task"),
		headers: map[string]string{"Idempotency-Key": "spec-1"}, want: 202})
	s.do(call{op: "POST /v1/tasks", path: "/v1/tasks", auth: taskToken, body: `{"url":"http://127.0.0.1/"}`, want: 400})
	s.do(call{op: "POST /v1/tasks", path: "/v1/tasks", auth: taskToken, body: `{"url":"ftp://x"}`,
		headers: map[string]string{"Idempotency-Key": "spec-2"}, want: 422})
	taskID, _ := task["id"].(string)
	waitFor(t, "the task delivered", func() (bool, string) {
		got := s.do(call{op: "GET /v1/tasks/{id}", path: "/v1/tasks/" + taskID, auth: taskToken, want: 200})
		return got["state"] == "succeeded", fmt.Sprint(got)
	})
	s.do(call{op: "GET /v1/tasks/{id}", path: "/v1/tasks/task_nope", auth: taskToken, want: 404})

	// Operations.
	s.do(call{op: "GET /healthz", path: "/healthz", want: 200})
	s.do(call{op: "GET /readyz", path: "/readyz", want: 200})
	s.do(call{op: "GET /readyz/delivery", path: "/readyz/delivery", want: 200})
	s.do(call{op: "GET /metrics", path: "/metrics", auth: metricsToken, want: 200})
	s.do(call{op: "GET /metrics", path: "/metrics", want: 401})

	for _, op := range declared {
		if len(s.covered[op]) == 0 {
			t.Errorf("%s is not exercised by this test", op)
		}
	}
}
