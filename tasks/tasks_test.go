package tasks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hookgate/hookgate/app"
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/egress"
	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/store"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

const (
	token      = "task-token-0123456789abcdef"
	otherToken = "other-token-0123456789abcdef"
	// operatorToken reads every task; token and otherToken are task
	// clients.
	operatorToken = "operator-token-0123456789abcdef"
	taskSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
)

// resolver answers from a table; a name's answers are used in turn (the
// last one repeats; "" is not found), and a name listed in block waits for
// release.
type resolver struct {
	mu      sync.Mutex
	answers map[string][]string
	calls   map[string]int
	block   map[string]chan struct{}
}

func (r *resolver) LookupNetIP(ctx context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	ch := r.block[host]
	as := r.answers[host]
	n := r.calls[host]
	r.calls[host]++
	r.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if len(as) == 0 || as[min(n, len(as)-1)] == "" { // "": not found this time
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return []netip.Addr{netip.MustParseAddr(as[min(n, len(as)-1)])}, nil
}

type harness struct {
	*app.App
	cfg *config.Config
	res *resolver
}

// start runs a gateway whose tasks section gets extra lines; allowList
// is tasks.allow.
func start(t *testing.T, extra string) *harness {
	return startAllow(t, "[127.0.0.1, allowed.test]", extra)
}

func startAllow(t *testing.T, allowList, extra string) *harness {
	t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
listen: "127.0.0.1:0"
data_dir: %q
api: {tokens: [%q]}
sources: [{name: s, verify: none, id_field: id}]
tasks:
  tokens: [%q, %q]
  secret: %q
  retries: 1
  retry_wait_min: 5ms
  retry_wait_max: 20ms
  schedule: [20ms, 20ms]
  allow: %s
%s`, t.TempDir(), operatorToken, token, otherToken, taskSecret, allowList, extra)), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{cfg: cfg, res: &resolver{answers: map[string][]string{
		"allowed.test": {"127.0.0.1"},
		"public.test":  {"93.184.216.34"},
		"private.test": {"10.1.2.3"},
		"rebind.test":  {"93.184.216.34", "127.0.0.1"},
	}, calls: map[string]int{}, block: map[string]chan struct{}{}}}
	h.restart(t)
	return h
}

func (h *harness) restart(t *testing.T) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	a := app.New(h.cfg, log).WithEgressOptions(egress.WithResolver(h.res))
	if err := a.Start(context.Background()); err != nil {
		a.Stop(context.Background())
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Stop(context.Background()) })
	h.App = a
}

type answer struct {
	status   int
	replayed bool
	body     map[string]any
	raw      string
}

func (a answer) code() string {
	e, _ := a.body["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

func (h *harness) do(t *testing.T, method, path, tok, key, body string) answer {
	t.Helper()
	a, err := h.request(method, path, tok, key, body)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// post submits a task; unlike submit, it may run beside the test.
func (h *harness) post(tok, key, body string) (answer, error) {
	return h.request(http.MethodPost, "/v1/tasks", tok, key, body)
}

func (h *harness) request(method, path, tok, key, body string) (answer, error) {
	req, _ := http.NewRequest(method, "http://"+h.Addr()+path, strings.NewReader(body))
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true", raw: string(raw)}
	json.Unmarshal(raw, &a.body)
	return a, nil
}

func (h *harness) submit(t *testing.T, key, body string) answer {
	t.Helper()
	return h.do(t, http.MethodPost, "/v1/tasks", token, key, body)
}

func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	gatewaytest.WaitFor(t, what, 30*time.Second, cond)
}

func TestAnswers(t *testing.T) {
	h := start(t, "")
	body := `{"url":"http://public.test/hook","body":{"a":1}}`
	tests := []struct {
		name, tok, key, body string
		status               int
		code                 string
	}{
		{"no token", "", "k1", body, 401, "unauthorized"},
		{"bad token", "nope-nope-nope-nope-nope", "k1", body, 401, "unauthorized"},
		{"no key", token, "", body, 400, "missing_idempotency_key"},
		{"long key", token, strings.Repeat("k", 256), body, 400, "invalid_idempotency_key"},
		{"malformed json", token, "k1", `{"url":`, 400, "malformed_json"},
		{"unknown field", token, "k1", `{"url":"http://public.test/","bogus":1}`, 422, "invalid_task"},
		{"no url", token, "k1", `{"body":{}}`, 422, "invalid_url"},
		{"ftp url", token, "k1", `{"url":"ftp://public.test/x"}`, 422, "invalid_url"},
		{"bad method", token, "k1", `{"url":"http://public.test/","method":"CONNECT"}`, 422, "invalid_method"},
		{"bad header name", token, "k1", `{"url":"http://public.test/","headers":{"a b":"c"}}`, 422, "invalid_header"},
		{"header with newline", token, "k1", `{"url":"http://public.test/","headers":{"X-A":"b\r\nX-Evil: 1"}}`, 422, "invalid_header"},
		{"reserved header", token, "k1", `{"url":"http://public.test/","headers":{"Host":"x"}}`, 422, "invalid_header"},
		{"header twice by case", token, "k1", `{"url":"http://public.test/","headers":{"x-a":"1","X-A":"2"}}`, 422, "invalid_header"},
		{"both bodies", token, "k1", `{"url":"http://public.test/","body":1,"body_base64":"AA=="}`, 422, "invalid_task"},
		{"bad base64", token, "k1", `{"url":"http://public.test/","body_base64":"!!"}`, 422, "invalid_task"},
		{"loopback", token, "k1", `{"url":"http://127.0.0.2/"}`, 422, "destination_not_allowed"},
		{"private by name", token, "k1", `{"url":"http://private.test/"}`, 422, "destination_not_allowed"},
		{"metadata", token, "k1", `{"url":"http://169.254.169.254/latest/meta-data/"}`, 422, "destination_not_allowed"},
		{"mapped loopback", token, "k1", `{"url":"http://[::ffff:127.0.0.3]/"}`, 422, "destination_not_allowed"},
		{"localhost name", token, "k1", `{"url":"http://api.localhost/"}`, 422, "destination_not_allowed"},
		{"numeric loopback name", token, "k1", `{"url":"http://2130706434/"}`, 422, "destination_not_allowed"},
		{"numeric name", token, "k1", `{"url":"http://0x5db8d822/"}`, 422, "invalid_url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := h.do(t, http.MethodPost, "/v1/tasks", tt.tok, tt.key, tt.body)
			if a.status != tt.status || a.code() != tt.code {
				t.Fatalf("got %d %q (%s), want %d %q", a.status, a.code(), a.raw, tt.status, tt.code)
			}
		})
	}

	// Refused requests did not consume the key: it still makes a task.
	first := h.submit(t, "k1", body)
	if first.status != 202 || first.replayed || !strings.HasPrefix(fmt.Sprint(first.body["id"]), "task_") {
		t.Fatalf("first: %d %s", first.status, first.raw)
	}
	again := h.submit(t, "k1", body)
	if again.status != 202 || !again.replayed || again.raw != first.raw {
		t.Fatalf("replay: %d replayed=%v %s, want the first answer again", again.status, again.replayed, again.raw)
	}
	// Equivalent JSON (spacing) is the same request.
	same := h.submit(t, "k1", `{ "body" : { "a" : 1 }, "url" : "http://public.test/hook" }`)
	if !same.replayed || same.raw != first.raw {
		t.Fatalf("equivalent request: %d replayed=%v %s", same.status, same.replayed, same.raw)
	}
	mismatch := h.submit(t, "k1", `{"url":"http://public.test/other"}`)
	if mismatch.status != 422 || mismatch.code() != "idempotency_key_mismatch" {
		t.Fatalf("mismatch: %d %s", mismatch.status, mismatch.raw)
	}
	other := h.do(t, http.MethodPost, "/v1/tasks", otherToken, "k1", body)
	if other.status != 202 || other.replayed || other.body["id"] == first.body["id"] {
		t.Fatalf("another token's key k1: %d %s, want a new task", other.status, other.raw)
	}
	if a := h.do(t, http.MethodGet, "/v1/tasks/"+fmt.Sprint(first.body["id"]), otherToken, "", ""); a.status != 404 {
		t.Fatalf("another task client read the task: %d", a.status)
	}
	if a := h.do(t, http.MethodGet, "/v1/tasks/"+fmt.Sprint(first.body["id"]), operatorToken, "", ""); a.status != 200 {
		t.Fatalf("an operator read the task: %d %s, want 200", a.status, a.raw)
	}
}

func TestInFlightAndConcurrent(t *testing.T) {
	h := start(t, "")
	release := make(chan struct{})
	h.res.mu.Lock()
	h.res.block["public.test"] = release
	h.res.mu.Unlock()
	body := `{"url":"http://public.test/slow"}`
	firstDone := make(chan answer)
	go func() { firstDone <- h.submit(t, "slow-key", body) }()
	waitFor(t, "the first request to be resolving", func() (bool, string) {
		h.res.mu.Lock()
		defer h.res.mu.Unlock()
		return h.res.calls["public.test"] > 0, ""
	})
	a := h.submit(t, "slow-key", body)
	if a.status != 409 || a.code() != "idempotency_key_in_flight" {
		t.Fatalf("while in flight: %d %s, want 409", a.status, a.raw)
	}
	close(release)
	if first := <-firstDone; first.status != 202 {
		t.Fatalf("first: %d %s", first.status, first.raw)
	}

	// Many concurrent requests with one key make one task.
	var wg sync.WaitGroup
	var mu sync.Mutex
	ids := map[string]int{}
	statuses := map[int]int{}
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := h.submit(t, "race-key", `{"url":"http://public.test/race"}`)
			mu.Lock()
			defer mu.Unlock()
			statuses[a.status]++
			if a.status == 202 {
				ids[fmt.Sprint(a.body["id"])]++
			}
		}()
	}
	wg.Wait()
	if len(ids) != 1 || statuses[202]+statuses[409] != 20 {
		t.Fatalf("20 concurrent requests made tasks %v with statuses %v, want one task", ids, statuses)
	}
}

// A key outlives a restart; a key past its TTL makes a new task. The TTLs
// are chosen so that no timing can change the outcome: the key replayed
// after a restart lives for an hour, the key that expires for 1 ms (any
// delay only makes it more expired).
func TestReplayAfterRestartAndExpiry(t *testing.T) {
	h := start(t, "  key_ttl: 1h\n")
	body := `{"url":"http://public.test/x"}`
	first := h.submit(t, "key-r", body)
	if first.status != 202 {
		t.Fatalf("first: %d %s", first.status, first.raw)
	}
	if err := h.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.restart(t)
	again := h.submit(t, "key-r", body)
	if !again.replayed || again.raw != first.raw {
		t.Fatalf("after restart: %d replayed=%v %s", again.status, again.replayed, again.raw)
	}

	// A shorter key_ttl applies to keys claimed from now on; key-r keeps
	// the hour it was given.
	if err := h.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.cfg.Tasks.KeyTTL = time.Millisecond
	h.restart(t)
	if a := h.submit(t, "key-r", body); !a.replayed || a.raw != first.raw {
		t.Fatalf("after a restart with a shorter key_ttl: %d replayed=%v %s", a.status, a.replayed, a.raw)
	}
	short := h.submit(t, "key-e", body)
	if short.status != 202 || short.replayed {
		t.Fatalf("key-e: %d %s", short.status, short.raw)
	}
	waitFor(t, "key-e to expire", func() (bool, string) {
		a := h.submit(t, "key-e", body)
		return a.status == 202 && !a.replayed && a.body["id"] != short.body["id"], a.raw
	})
}

func TestDeliveredSignedOnceAndRetried(t *testing.T) {
	var fail atomic.Int32
	fail.Store(2)
	var mu sync.Mutex
	var got []*http.Request
	var bodies [][]byte
	ds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r)
		bodies = append(bodies, b)
		mu.Unlock()
		if fail.Add(-1) >= 0 {
			w.WriteHeader(500)
			return
		}
		if r.URL.Path == "/gone" {
			w.WriteHeader(410)
			return
		}
		w.WriteHeader(200)
	}))
	defer ds.Close()
	port := ds.Listener.Addr().(*net.TCPAddr).Port
	h := start(t, "")
	a := h.submit(t, "deliver-1", fmt.Sprintf(
		`{"url":"http://allowed.test:%d/put","method":"put","headers":{"X-Custom":"yes"},"body_base64":"aGVsbG8=","content_type":"text/plain"}`, port))
	if a.status != 202 {
		t.Fatalf("submit: %d %s", a.status, a.raw)
	}
	id := fmt.Sprint(a.body["id"])
	var task map[string]any
	waitFor(t, "task succeeded", func() (bool, string) {
		r := h.do(t, http.MethodGet, "/v1/tasks/"+id, token, "", "")
		task = r.body
		return task["state"] == "succeeded", r.raw
	})
	mu.Lock()
	reqs := append([]*http.Request(nil), got...)
	bs := append([][]byte(nil), bodies...)
	mu.Unlock()
	if len(reqs) != 3 || task["attempts"] != float64(3) {
		t.Fatalf("downstream saw %d requests, task %v; want 3", len(reqs), task)
	}
	wh, _ := standardwebhooks.NewWebhook(taskSecret)
	key := outbound.IdempotencyKey(outbound.TaskRoute, store.TaskSource, id)
	for i, r := range reqs {
		if r.Method != "PUT" || r.Header.Get("Idempotency-Key") != key || r.Header.Get("X-Custom") != "yes" ||
			r.Header.Get("Content-Type") != "text/plain" || string(bs[i]) != "hello" {
			t.Fatalf("request %d: %s %v %q", i, r.Method, r.Header, bs[i])
		}
		if err := wh.Verify(bs[i], r.Header); err != nil {
			t.Fatalf("request %d signature: %v", i, err)
		}
	}

	// A task that dies (410) is sent again by an operator retry, same key.
	a = h.submit(t, "deliver-2", fmt.Sprintf(`{"url":"http://127.0.0.1:%d/gone"}`, port))
	id2 := fmt.Sprint(a.body["id"])
	var dead map[string]any
	waitFor(t, "task dead", func() (bool, string) {
		r := h.do(t, http.MethodGet, "/v1/tasks/"+id2, token, "", "")
		dead = r.body
		return dead["state"] == "dead", r.raw
	})
	ds.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r)
		mu.Unlock()
		w.WriteHeader(200)
	})
	// The task's delivery_id is its delivery's API ID.
	if want := store.DeliveryUID(outbound.TaskRoute, store.TaskSource, id2); dead["delivery_id"] != want {
		t.Fatalf("delivery_id %v, want %s", dead["delivery_id"], want)
	}
	r := h.do(t, http.MethodPost, fmt.Sprintf("/v1/deliveries/%v/retry", dead["delivery_id"]), token, "", "")
	if r.status != 202 || r.body["id"] != dead["delivery_id"] {
		t.Fatalf("retry: %d %s", r.status, r.raw)
	}
	waitFor(t, "retried task succeeded", func() (bool, string) {
		r := h.do(t, http.MethodGet, "/v1/tasks/"+id2, token, "", "")
		return r.body["state"] == "succeeded", r.raw
	})
	mu.Lock()
	last := got[len(got)-1]
	mu.Unlock()
	if last.Header.Get("Idempotency-Key") != outbound.IdempotencyKey(outbound.TaskRoute, store.TaskSource, id2) {
		t.Fatalf("retry key %q", last.Header.Get("Idempotency-Key"))
	}
}

// A name that resolved to a public address at submit time and to loopback
// at dial time is never connected to.
func TestDNSRebindingRefusedAtDial(t *testing.T) {
	var hits atomic.Int32
	ds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer ds.Close()
	port := ds.Listener.Addr().(*net.TCPAddr).Port
	h := startAllow(t, "[allowed.test]", "")
	a := h.submit(t, "rebind", fmt.Sprintf(`{"url":"http://rebind.test:%d/"}`, port))
	if a.status != 202 {
		t.Fatalf("submit: %d %s", a.status, a.raw)
	}
	id := fmt.Sprint(a.body["id"])
	waitFor(t, "a refused attempt", func() (bool, string) {
		r := h.do(t, http.MethodGet, "/v1/tasks/"+id, token, "", "")
		return strings.Contains(r.raw, "not allowed"), r.raw
	})
	if n := hits.Load(); n != 0 {
		t.Fatalf("the downstream on loopback was reached %d times", n)
	}
}

// A stored task whose request cannot be read back is an internal error,
// not a task with an empty URL and method.
func TestGetUnreadableStoredTask(t *testing.T) {
	h := start(t, "")
	if err := h.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(context.Background(), store.Config{Path: h.cfg.Store.Path}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ev := &store.Event{ID: "task_unreadable", Type: "task", ContentType: "application/json",
		Body: []byte("not json"), ReceivedAt: time.Now()}
	if _, _, err := st.ClaimKey(context.Background(), "scope", "key-u", "fp", time.Hour, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateTask(context.Background(), ev, "scope", "key-u", http.StatusAccepted, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	h.restart(t)
	if a := h.do(t, http.MethodGet, "/v1/tasks/task_unreadable", operatorToken, "", ""); a.status != http.StatusInternalServerError || a.code() != "internal" {
		t.Fatalf("GET: %d %s", a.status, a.raw)
	}
}

// A name that does not resolve at submission (a passing DNS failure) is
// queued, not refused: the dial-time check resolves it again. An attempt
// that cannot resolve it fails and is retried; a name that then resolves
// to a forbidden address is refused when dialled.
func TestUnresolvableAtSubmitQueued(t *testing.T) {
	var hits atomic.Int32
	ds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer ds.Close()
	port := ds.Listener.Addr().(*net.TCPAddr).Port
	h := start(t, "")
	h.res.mu.Lock()
	h.res.answers["late.test"] = []string{"", "", "127.0.0.1"} // submission, first dial, then found
	h.res.answers["late-private.test"] = []string{"", "10.1.2.3"}
	h.res.answers["late-loopback.test"] = []string{"", "127.0.0.2"}
	h.res.mu.Unlock()

	a := h.submit(t, "late-1", fmt.Sprintf(`{"url":"http://late.test:%d/late"}`, port))
	if a.status != 202 {
		t.Fatalf("submit with an unresolvable name: %d %s, want 202", a.status, a.raw)
	}
	id := fmt.Sprint(a.body["id"])
	var task answer
	waitFor(t, "the task delivered once its name resolves", func() (bool, string) {
		task = h.do(t, http.MethodGet, "/v1/tasks/"+id, token, "", "")
		return task.body["state"] == "succeeded", task.raw
	})
	list, _ := task.body["attempt_list"].([]any)
	if len(list) != 2 || hits.Load() != 1 {
		t.Fatalf("%d attempts, %d requests downstream, want 2 attempts (the first unresolved) and 1 request: %s", len(list), hits.Load(), task.raw)
	}
	if first, _ := list[0].(map[string]any); !strings.Contains(fmt.Sprint(first["error"]), "resolving late.test") {
		t.Fatalf("first attempt: %v, want a resolution failure", first)
	}

	for _, host := range []string{"late-private.test", "late-loopback.test"} {
		a := h.submit(t, "late-"+host, fmt.Sprintf(`{"url":"http://%s:%d/forbidden"}`, host, port))
		if a.status != 202 {
			t.Fatalf("submit %s: %d %s, want 202", host, a.status, a.raw)
		}
		id := fmt.Sprint(a.body["id"])
		waitFor(t, host+" refused at dial", func() (bool, string) {
			r := h.do(t, http.MethodGet, "/v1/tasks/"+id, token, "", "")
			return strings.Contains(r.raw, "destination not allowed"), r.raw
		})
	}
	if n := hits.Load(); n != 1 {
		t.Fatalf("the downstream was reached %d times, want once (forbidden addresses are never dialled)", n)
	}
}

// A task's "idempotency_key" is the Idempotency-Key the downstream gets,
// on every attempt and round, in place of the derived hg_ one; the
// signature's webhook-id and the delivery's record keep the derived key.
// It is part of the request: another key under one Idempotency-Key is a
// mismatch.
func TestTaskOwnIdempotencyKey(t *testing.T) {
	var mu sync.Mutex
	var got []http.Header
	var bodies [][]byte
	var fail atomic.Int32
	fail.Store(3) // the first round (2 attempts) and the second's first attempt fail
	var gone atomic.Bool
	gone.Store(true)
	var goneKeys []string
	ds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Path == "/gone" {
			goneKeys = append(goneKeys, r.Header.Get("Idempotency-Key"))
			if gone.Load() {
				w.WriteHeader(410)
			}
			return
		}
		got = append(got, r.Header.Clone())
		bodies = append(bodies, b)
		if fail.Add(-1) >= 0 {
			w.WriteHeader(503)
		}
	}))
	defer ds.Close()
	h := start(t, "")
	const own = "order-1234 charge:v2/Zz~!"
	body := fmt.Sprintf(`{"url":"%s/charge","body":{"amount":5},"idempotency_key":%q}`, ds.URL, own)
	a := h.submit(t, "call-1", body)
	if a.status != 202 || a.body["idempotency_key"] != own {
		t.Fatalf("submit: %d %s, want 202 showing idempotency_key %q", a.status, a.raw, own)
	}
	id := fmt.Sprint(a.body["id"])
	derived := outbound.IdempotencyKey(outbound.TaskRoute, store.TaskSource, id)
	var task answer
	waitFor(t, "the task delivered", func() (bool, string) {
		task = h.do(t, http.MethodGet, "/v1/tasks/"+id, token, "", "")
		return task.body["state"] == "succeeded", task.raw
	})
	if task.body["idempotency_key"] != own {
		t.Errorf("GET task: idempotency_key %v, want %q", task.body["idempotency_key"], own)
	}
	mu.Lock()
	hs, bs := append([]http.Header(nil), got...), append([][]byte(nil), bodies...)
	mu.Unlock()
	if len(hs) != 4 {
		t.Fatalf("downstream saw %d requests, want 4", len(hs))
	}
	wh, _ := standardwebhooks.NewWebhook(taskSecret)
	for i, hd := range hs {
		if k := hd.Values("Idempotency-Key"); len(k) != 1 || k[0] != own {
			t.Errorf("request %d: Idempotency-Key %q, want %q", i, k, own)
		}
		if hd.Get("webhook-id") != derived {
			t.Errorf("request %d: webhook-id %q, want the derived %q", i, hd.Get("webhook-id"), derived)
		}
		if err := wh.Verify(bs[i], hd); err != nil {
			t.Errorf("request %d signature: %v", i, err)
		}
	}
	d := h.do(t, http.MethodGet, fmt.Sprintf("/v1/deliveries/%v", task.body["delivery_id"]), token, "", "")
	if d.status != 200 || d.body["idempotency_key"] != derived {
		t.Errorf("the delivery: %d %s, want its derived key %q", d.status, d.raw, derived)
	}

	// The key is part of the request.
	if m := h.submit(t, "call-1", strings.Replace(body, "v2", "v3", 1)); m.status != 422 || m.code() != "idempotency_key_mismatch" {
		t.Errorf("another idempotency_key under the same call key: %d %s, want 422 idempotency_key_mismatch", m.status, m.raw)
	}
	if r := h.submit(t, "call-1", body); r.status != 202 || !r.replayed || r.raw != a.raw {
		t.Errorf("the same call again: %d %s, want the replay", r.status, r.raw)
	}
	// An operator's retry of a dead task sends its own key again.
	g := h.submit(t, "call-gone", fmt.Sprintf(`{"url":"%s/gone","idempotency_key":"gone-1"}`, ds.URL))
	gid := fmt.Sprint(g.body["id"])
	var dead answer
	waitFor(t, "the task dead", func() (bool, string) {
		dead = h.do(t, http.MethodGet, "/v1/tasks/"+gid, token, "", "")
		return dead.body["state"] == "dead", dead.raw
	})
	gone.Store(false)
	if r := h.do(t, http.MethodPost, fmt.Sprintf("/v1/deliveries/%v/retry", dead.body["delivery_id"]), operatorToken, "", ""); r.status != 202 {
		t.Fatalf("retry: %d %s", r.status, r.raw)
	}
	waitFor(t, "the retried task succeeded", func() (bool, string) {
		r := h.do(t, http.MethodGet, "/v1/tasks/"+gid, token, "", "")
		return r.body["state"] == "succeeded", r.raw
	})
	mu.Lock()
	if len(goneKeys) != 2 || goneKeys[0] != "gone-1" || goneKeys[1] != "gone-1" {
		t.Errorf("the dead task and its retry were sent with keys %q, want gone-1 twice", goneKeys)
	}
	mu.Unlock()

	// Without one, the derived key is sent and shown.
	if a := h.submit(t, "call-2", fmt.Sprintf(`{"url":"%s/x"}`, ds.URL)); a.status != 202 ||
		a.body["idempotency_key"] != outbound.IdempotencyKey(outbound.TaskRoute, store.TaskSource, fmt.Sprint(a.body["id"])) {
		t.Errorf("without idempotency_key: %d %s, want the derived key", a.status, a.raw)
	}
}

// A task's "idempotency_key" is bounded: 1 to 255 printable ASCII
// characters, no space at either end.
func TestTaskOwnIdempotencyKeyRefused(t *testing.T) {
	h := start(t, "")
	for _, tc := range []struct{ name, key, code string }{
		{"empty", `""`, "invalid_idempotency_key"},
		{"too long", `"` + strings.Repeat("k", 256) + `"`, "invalid_idempotency_key"},
		{"newline", `"a\nb"`, "invalid_idempotency_key"},
		{"control", `"a\u0000b"`, "invalid_idempotency_key"},
		{"del", `"a\u007fb"`, "invalid_idempotency_key"},
		{"non-ascii", `"clé"`, "invalid_idempotency_key"},
		{"leading space", `" a"`, "invalid_idempotency_key"},
		{"trailing space", `"a "`, "invalid_idempotency_key"},
		{"tab", `"a\tb"`, "invalid_idempotency_key"},
		{"number", `12`, "invalid_task"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := h.submit(t, "refused-"+tc.name, `{"url":"http://public.test/x","idempotency_key":`+tc.key+`}`)
			if a.status != 422 || a.code() != tc.code {
				t.Fatalf("got %d %s, want 422 %s", a.status, a.raw, tc.code)
			}
		})
	}
	if a := h.submit(t, "longest", `{"url":"http://public.test/x","idempotency_key":"`+strings.Repeat("k", 255)+`"}`); a.status != 202 {
		t.Fatalf("a 255-character key: %d %s, want 202", a.status, a.raw)
	}
}

// An Idempotency-Key given twice (two header lines) names no one key: a
// structured field's lines are one list, not the Item the key must be;
// hookgate would take the first line, an intermediary perhaps the last.
// It is refused, and neither key is taken.
func TestIdempotencyKeyTwiceRefused(t *testing.T) {
	h := start(t, "")
	body := `{"url":"http://public.test/hook"}`
	for _, keys := range [][]string{{"kA", "kB"}, {"kA", "kA"}} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+h.Addr()+"/v1/tasks", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header["Idempotency-Key"] = keys
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(raw), `"invalid_idempotency_key"`) {
			t.Errorf("Idempotency-Key %q: %d %s, want 400 invalid_idempotency_key", keys, resp.StatusCode, raw)
		}
	}
	for _, k := range []string{"kA", "kB"} {
		if a := h.submit(t, k, body); a.status != 202 || a.replayed {
			t.Errorf("key %s after the refusals: %d replayed=%v %s, want a new task", k, a.status, a.replayed, a.raw)
		}
	}
}

// A task is stored as JSON that escapes <, > and & six bytes each: a
// request within tasks.max_body whose header is made of them took 6 times
// its size, past the broker's max payload (here an external server's 1
// MiB), and the task, answered 202, was parked and never delivered. It is
// refused at the door instead, and nothing is stored.
func TestTaskStoredLargerThanItsLimitRefused(t *testing.T) {
	ns := gatewaytest.RunNATS(t, gatewaytest.FreePort(t), t.TempDir())
	h := start(t, fmt.Sprintf("nats: {url: %q}\n", ns.ClientURL()))
	hdr := strings.Repeat("<", 600<<10)
	a := h.submit(t, "big", `{"url":"http://public.test/hook","headers":{"X-A":"`+hdr+`"}}`)
	if a.status == 413 && a.code() == "body_too_large" {
		if p := h.do(t, http.MethodGet, "/v1/outbox/parked", operatorToken, "", ""); strings.Contains(p.raw, "task_") {
			t.Fatalf("refused, but parked: %s", p.raw)
		}
		// A task within the limit, with an escaped header, still goes, and
		// so does one of tasks.max_body with a JSON body.
		if a := h.submit(t, "small", `{"url":"http://public.test/hook","headers":{"X-A":"<&>"}}`); a.status != 202 {
			t.Fatalf("a small task: %d %s", a.status, a.raw)
		}
		envelope := `{"url":"http://public.test/hook","body":""}`
		full := `{"url":"http://public.test/hook","body":"` + strings.Repeat("a", h.cfg.Tasks.MaxBody-len(envelope)) + `"}`
		if a := h.submit(t, "full", full); a.status != 202 || len(full) != h.cfg.Tasks.MaxBody {
			t.Fatalf("a task of %d bytes, tasks.max_body %d: %d %.300s", len(full), h.cfg.Tasks.MaxBody, a.status, a.raw)
		}
		return
	}
	parked := "not parked within 10 s"
	if a.status == 202 {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if p := h.do(t, http.MethodGet, "/v1/outbox/parked", operatorToken, "", ""); strings.Contains(p.raw, "task_") {
				parked = "parked: " + p.raw[:min(len(p.raw), 300)]
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Fatalf("a task of %d bytes of '<' in a header: %d %.200s (%s); want 413 body_too_large", len(hdr), a.status, a.raw, parked)
}

// A task within tasks.max_body whose stored form passes four thirds of it
// (a URL of many '&', each stored as six bytes) is taken when the
// broker's max payload has room for it: the embedded server's 8 MiB.
// (It was 413 whatever the broker could carry.)
func TestTaskStoredWithinBrokerRoomTaken(t *testing.T) {
	h := start(t, "")
	url := "http://public.test/hook?" + strings.Repeat("a=1&", 400)
	envelope := `{"url":"` + url + `","body":""}`
	req := `{"url":"` + url + `","body":"` + strings.Repeat("a", h.cfg.Tasks.MaxBody-len(envelope)) + `"}`
	if a := h.submit(t, "amp", req); a.status != 202 {
		t.Fatalf("a task of %d bytes (tasks.max_body %d) with 400 '&' in its URL: %d %.300s; want 202",
			len(req), h.cfg.Tasks.MaxBody, a.status, a.raw)
	}
}
