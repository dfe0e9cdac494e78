package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/app"
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/internal/gatewaytest"
)

const (
	opToken      = "operator-token-0123456789"
	aToken       = "client-a-token-0123456789"
	bToken       = "client-b-token-0123456789"
	metricsToken = "metrics-token-0123456789"
)

type answer struct {
	status int
	raw    string
	body   map[string]any
}

func (a answer) code() string {
	e, _ := a.body["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

// ids are the delivery IDs of a list answer.
func (a answer) ids() []string {
	data, _ := a.body["data"].([]any)
	out := []string{}
	for _, d := range data {
		m, _ := d.(map[string]any)
		id, _ := m["id"].(string)
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

type client struct{ base string }

func (c client) do(t *testing.T, auth, method, path, key, body string) answer {
	t.Helper()
	req, _ := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, raw: string(raw)}
	json.Unmarshal(raw, &a.body)
	return a
}

func bearer(tok string) string { return "Bearer " + tok }

// Two task clients and an operator against every /v1 endpoint, over real
// HTTP: a task client sees and acts on its own tasks only; an operator on
// everything; the Bearer scheme is matched in any case.
func TestTokenScopes(t *testing.T) {
	ds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/gone" {
			w.WriteHeader(http.StatusGone) // the task is dead at once
		}
	}))
	defer ds.Close()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
listen: "127.0.0.1:0"
data_dir: %q
api: {tokens: [%q]}
metrics: {token: %q}
sources: [{name: s, verify: none, id_field: id}]
routes: [{name: r, sources: [s], url: %q}]
tasks:
  tokens: [%q, %q]
  allow: [127.0.0.1]
  retries: 0
  schedule: [10ms]
`, t.TempDir(), opToken, metricsToken, ds.URL, aToken, bToken)), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	gw := app.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := gw.Start(context.Background()); err != nil {
		gw.Stop(context.Background())
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Stop(context.Background()) })
	c := client{base: "http://" + gw.Addr()}

	// An event for route r, and dead tasks: two of A's, one of B's, one
	// of the operator's, all with the same Idempotency-Key.
	if a := c.do(t, "", http.MethodPost, "/webhooks/s", "", `{"id":"e1"}`); a.status != 200 {
		t.Fatalf("event: %d %s", a.status, a.raw)
	}
	task := func(tok, key string) (id, delivery string) {
		t.Helper()
		a := c.do(t, bearer(tok), http.MethodPost, "/v1/tasks", key, fmt.Sprintf(`{"url":%q}`, ds.URL+"/gone"))
		if a.status != 202 {
			t.Fatalf("task of %s: %d %s", tok, a.status, a.raw)
		}
		id = fmt.Sprint(a.body["id"])
		gatewaytest.WaitFor(t, "task "+id+" dead", 30*time.Second, func() (bool, string) {
			a := c.do(t, bearer(tok), http.MethodGet, "/v1/tasks/"+id, "", "")
			delivery, _ = a.body["delivery_id"].(string)
			return a.body["state"] == "dead", a.raw
		})
		return id, delivery
	}
	taskA, dA := task(aToken, "k")
	taskA2, dA2 := task(aToken, "k2")
	taskB, dB := task(bToken, "k")
	taskOp, dOp := task(opToken, "k")
	if taskA == taskB || taskA == taskOp || taskB == taskOp || taskA == taskA2 {
		t.Fatalf("one Idempotency-Key made one task for different tokens: %s %s %s", taskA, taskB, taskOp)
	}
	var dR string
	gatewaytest.WaitFor(t, "route r's delivery", 30*time.Second, func() (bool, string) {
		a := c.do(t, bearer(opToken), http.MethodGet, "/v1/deliveries?route=r&state=succeeded", "", "")
		if ids := a.ids(); len(ids) == 1 {
			dR = ids[0]
			return true, ""
		}
		return false, a.raw
	})

	sorted := func(ids ...string) []string { slices.Sort(ids); return ids }
	d := func(id string) string { return "/v1/deliveries/" + id }
	page1 := c.do(t, bearer(aToken), http.MethodGet, "/v1/deliveries?limit=1", "", "")
	cursorA, _ := page1.body["next_cursor"].(string)
	tests := []struct {
		name, auth, method, path string
		status                   int
		code                     string
		ids                      []string // for lists: exactly these deliveries
	}{
		// Lists.
		{"operator lists all", bearer(opToken), "GET", "/v1/deliveries", 200, "", sorted(dA, dA2, dB, dOp, dR)},
		{"operator lists tasks", bearer(opToken), "GET", "/v1/deliveries?route=_tasks", 200, "", sorted(dA, dA2, dB, dOp)},
		{"A lists its own", bearer(aToken), "GET", "/v1/deliveries", 200, "", sorted(dA, dA2)},
		{"A lists _tasks", bearer(aToken), "GET", "/v1/deliveries?route=_tasks", 200, "", sorted(dA, dA2)},
		{"A lists dead", bearer(aToken), "GET", "/v1/deliveries?state=dead&source=_task", 200, "", sorted(dA, dA2)},
		{"A lists route r", bearer(aToken), "GET", "/v1/deliveries?route=r", 200, "", []string{}},
		{"A lists source s", bearer(aToken), "GET", "/v1/deliveries?source=s", 200, "", []string{}},
		{"A lists page 1", bearer(aToken), "GET", "/v1/deliveries?limit=1", 200, "", []string{dA}},
		{"A lists page 2", bearer(aToken), "GET", "/v1/deliveries?limit=1&cursor=" + cursorA, 200, "", []string{dA2}},
		{"B lists its own", bearer(bToken), "GET", "/v1/deliveries?route=_tasks", 200, "", []string{dB}},

		// Reads.
		{"A reads its own", bearer(aToken), "GET", d(dA), 200, "", nil},
		{"A reads B's", bearer(aToken), "GET", d(dB), 404, "not_found", nil},
		{"A reads the operator's task", bearer(aToken), "GET", d(dOp), 404, "not_found", nil},
		{"A reads route r's", bearer(aToken), "GET", d(dR), 404, "not_found", nil},
		{"B reads A's", bearer(bToken), "GET", d(dA), 404, "not_found", nil},
		{"operator reads A's", bearer(opToken), "GET", d(dA), 200, "", nil},
		{"operator reads route r's", bearer(opToken), "GET", d(dR), 200, "", nil},

		// Tasks.
		{"A reads task B", bearer(aToken), "GET", "/v1/tasks/" + taskB, 404, "not_found", nil},
		{"A reads the operator's task", bearer(aToken), "GET", "/v1/tasks/" + taskOp, 404, "not_found", nil},
		{"B reads task B", bearer(bToken), "GET", "/v1/tasks/" + taskB, 200, "", nil},
		{"operator reads task A", bearer(opToken), "GET", "/v1/tasks/" + taskA, 200, "", nil},

		// Events and routes are operators' only.
		{"A lists events", bearer(aToken), "GET", "/v1/events", 403, "forbidden", nil},
		{"A reads an event", bearer(aToken), "GET", "/v1/events/s/e1", 403, "forbidden", nil},
		{"A reads its task's event", bearer(aToken), "GET", "/v1/events/_task/" + taskA, 403, "forbidden", nil},
		{"A replays an event", bearer(aToken), "POST", "/v1/events/s/e1/replay", 403, "forbidden", nil},
		{"A lists routes", bearer(aToken), "GET", "/v1/routes", 403, "forbidden", nil},
		{"A pauses a route", bearer(aToken), "POST", "/v1/routes/r/pause", 403, "forbidden", nil},
		{"operator lists events", bearer(opToken), "GET", "/v1/events", 200, "", nil},
		{"operator reads an event", bearer(opToken), "GET", "/v1/events/s/e1", 200, "", nil},
		{"operator lists routes", bearer(opToken), "GET", "/v1/routes", 200, "", nil},

		// Retries: another's delivery does not exist for a task client,
		// whatever its state.
		{"B retries A's", bearer(bToken), "POST", d(dA) + "/retry", 404, "not_found", nil},
		{"A retries B's", bearer(aToken), "POST", d(dB) + "/retry", 404, "not_found", nil},
		{"A retries route r's", bearer(aToken), "POST", d(dR) + "/retry", 404, "not_found", nil},
		{"A retries its own", bearer(aToken), "POST", d(dA) + "/retry", 202, "", nil},
		{"operator retries B's", bearer(opToken), "POST", d(dB) + "/retry", 202, "", nil},
		{"operator retries route r's", bearer(opToken), "POST", d(dR) + "/retry", 409, "already_succeeded", nil},

		// The scheme's case does not matter (RFC 9110 section 11.1).
		{"lower-case bearer", "bearer " + aToken, "GET", "/v1/tasks/" + taskA, 200, "", nil},
		{"upper-case bearer, two spaces", "BEARER  " + aToken, "GET", d(dA), 200, "", nil},
		{"no token", "", "GET", "/v1/deliveries", 401, "unauthorized", nil},
		{"scheme only", "Bearer", "GET", "/v1/deliveries", 401, "unauthorized", nil},
		{"another scheme", "Basic " + aToken, "GET", "/v1/deliveries", 401, "unauthorized", nil},
		{"scheme glued to the token", "Bearer" + aToken, "GET", "/v1/deliveries", 401, "unauthorized", nil},
		{"unknown token", bearer("client-c-token-0123456789"), "GET", "/v1/deliveries", 401, "unauthorized", nil},
		{"metrics, lower-case bearer", "bearer " + metricsToken, "GET", "/metrics", 200, "", nil},
		{"metrics, a task client's token", bearer(aToken), "GET", "/metrics", 401, "unauthorized", nil},

		// Last: it sets route r's delivery pending again.
		{"operator replays an event", bearer(opToken), "POST", "/v1/events/s/e1/replay", 202, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := c.do(t, tt.auth, tt.method, tt.path, "", "")
			if a.status != tt.status || a.code() != tt.code {
				t.Fatalf("%s %s: %d %q, want %d %q\n%s", tt.method, tt.path, a.status, a.code(), tt.status, tt.code, a.raw)
			}
			if tt.ids != nil && !slices.Equal(a.ids(), tt.ids) {
				t.Fatalf("%s %s listed deliveries %v, want %v\n%s", tt.method, tt.path, a.ids(), tt.ids, a.raw)
			}
		})
	}

	// A task submitted with a lower-case scheme is the same client's: its
	// key replays A's task.
	a := c.do(t, "bEaReR "+aToken, http.MethodPost, "/v1/tasks", "k", fmt.Sprintf(`{"url":%q}`, ds.URL+"/gone"))
	if a.status != 202 || a.body["id"] != taskA {
		t.Fatalf("A's key k with a lower-case scheme: %d %s, want a replay of %s", a.status, a.raw, taskA)
	}
}
