package inbound

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stripe/stripe-go/v83/webhook"

	"github.com/hookgate/hookgate/httperror"
	"github.com/hookgate/hookgate/signature"
	"github.com/hookgate/hookgate/store"
)

const (
	stripeSecret   = "whsec_test_stripe_secret"
	stripeRotated  = "whsec_previous_stripe"
	standardSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	githubSecret   = "It's a Secret to Everybody"
	hmacSecret     = "asyncqueue-shared-secret"
)

// testSources are one source of every scheme, each ID and type where its
// scheme's defaults put them unless given.
func testSources() []Source {
	return []Source{
		{Name: "stripe", Verify: "stripe", Secrets: []string{stripeSecret, stripeRotated}},
		{Name: "std", Verify: "standard", Secrets: []string{standardSecret}},
		{Name: "gh", Verify: "github", Secrets: []string{githubSecret}},
		{Name: "tasks", Verify: "hmac", Secrets: []string{hmacSecret},
			HMAC:     signature.HMACOptions{Header: "X-Signature", Prefix: "sha512=", Algorithm: "sha512", Encoding: "base64"},
			IDHeader: "X-Task-Id", TypeField: "task.kind"},
		{Name: "open", Verify: "none", IDField: "data.id", MaxBody: 64},
		// Task-queue callbacks: one job, several statuses.
		{Name: "jobs", Verify: "hmac", Secrets: []string{hmacSecret},
			HMAC:   signature.HMACOptions{Header: "X-Signature", Prefix: "sha512=", Algorithm: "sha512", Encoding: "base64"},
			IDExpr: `body.job.id + ":" + body.status`, TypeExpr: `"job." + body.status`},
		{Name: "byheader", Verify: "none", IDExpr: `headers["x-queue"] + "/" + headers["x-task"] + "/" + type`,
			TypeExpr: `source + ".task"`},
	}
}

type harness struct {
	url     string
	store   *store.Store
	metrics *Metrics
	now     time.Time
	mu      sync.Mutex
}

func (h *harness) clock() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.now
}

func (h *harness) setNow(t time.Time) {
	h.mu.Lock()
	h.now = t
	h.mu.Unlock()
}

// newHarness serves the inbound handler over real HTTP with a real store.
func newHarness(t testing.TB) *harness {
	t.Helper()
	return newHarnessWith(t, Options{})
}

// newHarnessWith is newHarness with opts (its Metrics and Now are the
// harness's).
func newHarnessWith(t testing.TB, opts Options) *harness {
	t.Helper()
	return newHarnessFor(t, testSources(), opts)
}

// newHarnessFor is newHarnessWith serving sources.
func newHarnessFor(t testing.TB, sources []Source, opts Options) *harness {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(context.Background(), store.Config{Path: filepath.Join(t.TempDir(), "db")}, log)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{store: st, metrics: NewMetrics(prometheus.NewRegistry()), now: time.Now()}
	opts.Metrics, opts.Now = h.metrics, h.clock
	handler, err := New(sources, st, log, opts)
	if err != nil {
		t.Fatal(err)
	}
	app := fiber.New(fiber.Config{DisableStartupMessage: true, BodyLimit: handler.MaxBody() + 1,
		ErrorHandler: httperror.Handler(log)})
	handler.Register(app)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go app.Listener(ln)
	t.Cleanup(func() {
		http.DefaultClient.CloseIdleConnections()
		app.ShutdownWithTimeout(5 * time.Second)
		st.Close()
	})
	h.url = "http://" + ln.Addr().String()
	return h
}

type answer struct {
	status int
	body   map[string]any
}

func (h *harness) post(t testing.TB, source string, body []byte, headers map[string]string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.url+"/webhooks/"+source, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a answer
	a.status = resp.StatusCode
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &a.body); err != nil {
		t.Fatalf("answer is not JSON: %q", raw)
	}
	return a
}

func (a answer) code() string {
	e, _ := a.body["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

func stripeEvent(id, typ string) []byte {
	return []byte(fmt.Sprintf(`{"id":%q,"object":"event","type":%q,"data":{"object":{"id":"in_1"}}}`, id, typ))
}

func stripeHeader(body []byte, secret string, ts time.Time) map[string]string {
	p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: ts})
	return map[string]string{"Stripe-Signature": p.Header}
}

func standardHeaders(secret, id string, ts time.Time, body []byte) map[string]string {
	key, _ := signature.DecodeStandardSecret(secret)
	return map[string]string{
		"webhook-id":        id,
		"webhook-timestamp": strconv.FormatInt(ts.Unix(), 10),
		"webhook-signature": signature.SignStandard(key, id, ts, body),
	}
}

func githubHeaders(secret, delivery, event string, body []byte) map[string]string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return map[string]string{
		"X-Hub-Signature-256": "sha256=" + hex.EncodeToString(m.Sum(nil)),
		"X-GitHub-Delivery":   delivery,
		"X-GitHub-Event":      event,
	}
}

func hmacHeaders(secret, id string, body []byte) map[string]string {
	m := hmac.New(sha512.New, []byte(secret))
	m.Write(body)
	return map[string]string{"X-Signature": "sha512=" + base64.StdEncoding.EncodeToString(m.Sum(nil)), "X-Task-Id": id}
}

func (h *harness) stored(t testing.TB, source, id string) *store.Event {
	t.Helper()
	ev, err := h.store.GetEvent(context.Background(), source, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func (h *harness) count(t testing.TB) int64 {
	t.Helper()
	n, _, err := h.store.Counts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestAcceptedAndDuplicate(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	now := h.clock()
	ghBody := []byte(`{"zen":"Design for failure."}`)
	taskBody := []byte(`{"task":{"kind":"email.send"},"n":1}`)
	tests := []struct {
		name, source, wantID, wantType string
		body                           []byte
		headers                        map[string]string
	}{
		{"stripe", "stripe", "evt_1", "invoice.paid", stripeEvent("evt_1", "invoice.paid"),
			stripeHeader(stripeEvent("evt_1", "invoice.paid"), stripeSecret, now)},
		{"stripe rotated secret", "stripe", "evt_2", "customer.created", stripeEvent("evt_2", "customer.created"),
			stripeHeader(stripeEvent("evt_2", "customer.created"), stripeRotated, now)},
		{"standard", "std", "msg_1", "user.created", []byte(`{"type":"user.created"}`),
			standardHeaders(standardSecret, "msg_1", now, []byte(`{"type":"user.created"}`))},
		{"standard without type", "std", "msg_2", "", []byte(`{"test": 1}`),
			standardHeaders(standardSecret, "msg_2", now, []byte(`{"test": 1}`))},
		{"github", "gh", "72d3162e-cc78-11e3-81ab-4c9367dc0958", "ping", ghBody,
			githubHeaders(githubSecret, "72d3162e-cc78-11e3-81ab-4c9367dc0958", "ping", ghBody)},
		{"hmac", "tasks", "task-9", "email.send", taskBody, hmacHeaders(hmacSecret, "task-9", taskBody)},
		{"none", "open", "x1", "", []byte(`{"data":{"id":"x1"}}`), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := h.post(t, tt.source, tt.body, tt.headers)
			if a.status != 200 || a.body["status"] != "accepted" {
				t.Fatalf("first delivery: got %d %v, want 200 accepted", a.status, a.body)
			}
			if a.body["event_id"] != tt.wantID || a.body["event_type"] != tt.wantType {
				t.Fatalf("answer = %v, want id %q type %q", a.body, tt.wantID, tt.wantType)
			}
			ev := h.stored(t, tt.source, tt.wantID)
			if ev == nil || !bytes.Equal(ev.Body, tt.body) || ev.Type != tt.wantType {
				t.Fatalf("stored = %+v, want body %q type %q", ev, tt.body, tt.wantType)
			}
			if ev.ContentType != "application/json" {
				t.Errorf("content type = %q", ev.ContentType)
			}
			a = h.post(t, tt.source, tt.body, tt.headers)
			if a.status != 200 || a.body["status"] != "duplicate" {
				t.Fatalf("second delivery: got %d %v, want 200 duplicate", a.status, a.body)
			}
		})
	}
	if got := testutil.ToFloat64(h.metrics.requests.WithLabelValues("stripe", OutcomeDuplicate)); got != 2 {
		t.Errorf("stripe duplicates counted = %v, want 2", got)
	}
}

func TestRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	now := h.clock()
	body := stripeEvent("evt_bad", "invoice.paid")
	stdBody := []byte(`{"type":"a"}`)
	big := []byte(`{"data":{"id":"big","pad":"` + strings.Repeat("x", 100) + `"}}`)
	tests := []struct {
		name, source string
		body         []byte
		headers      map[string]string
		status       int
		code         string
	}{
		{"unknown source", "nope", body, nil, 404, "unknown_source"},
		{"stripe missing signature", "stripe", body, nil, 401, "missing_signature"},
		{"stripe wrong secret", "stripe", body, stripeHeader(body, "whsec_wrong", now), 401, "invalid_signature"},
		{"stripe tampered body", "stripe", stripeEvent("evt_bad", "invoice.void"), stripeHeader(body, stripeSecret, now), 401, "invalid_signature"},
		{"stripe stale", "stripe", body, stripeHeader(body, stripeSecret, now.Add(-6*time.Minute)), 401, "timestamp_out_of_tolerance"},
		{"stripe future", "stripe", body, stripeHeader(body, stripeSecret, now.Add(6*time.Minute)), 401, "timestamp_out_of_tolerance"},
		{"stripe malformed header", "stripe", body, map[string]string{"Stripe-Signature": "garbage"}, 401, "malformed_signature"},
		{"stripe malformed json", "stripe", []byte(`{"id":"evt_x",`), stripeHeader([]byte(`{"id":"evt_x",`), stripeSecret, now), 400, "malformed_json"},
		{"stripe missing id", "stripe", []byte(`{"type":"a"}`), stripeHeader([]byte(`{"type":"a"}`), stripeSecret, now), 400, "missing_event_id"},
		{"stripe id too long", "stripe", stripeEvent(strings.Repeat("e", 256), "a"), stripeHeader(stripeEvent(strings.Repeat("e", 256), "a"), stripeSecret, now), 400, "invalid_event_id"},
		{"stripe id with a line break", "stripe", stripeEvent("evt_a\nb", "a"), stripeHeader(stripeEvent("evt_a\nb", "a"), stripeSecret, now), 400, "invalid_event_id"},
		{"stripe id with a leading space", "stripe", stripeEvent(" evt_a", "a"), stripeHeader(stripeEvent(" evt_a", "a"), stripeSecret, now), 400, "invalid_event_id"},
		{"stripe id with a trailing space", "stripe", stripeEvent("evt_a ", "a"), stripeHeader(stripeEvent("evt_a ", "a"), stripeSecret, now), 400, "invalid_event_id"},
		{"stripe id with a tab", "stripe", stripeEvent("evt\ta", "a"), stripeHeader(stripeEvent("evt\ta", "a"), stripeSecret, now), 400, "invalid_event_id"},
		{"standard stale", "std", stdBody, standardHeaders(standardSecret, "m1", now.Add(-10*time.Minute), stdBody), 401, "timestamp_out_of_tolerance"},
		{"standard wrong key", "std", stdBody, standardHeaders("whsec_"+base64.StdEncoding.EncodeToString([]byte("another-secret-key-32-bytes-long")), "m1", now, stdBody), 401, "invalid_signature"},
		{"github forged", "gh", []byte(`{}`), githubHeaders("nope", "d1", "push", []byte(`{}`)), 401, "invalid_signature"},
		{"github missing delivery", "gh", []byte(`{}`), map[string]string{"X-Hub-Signature-256": githubHeaders(githubSecret, "", "", []byte(`{}`))["X-Hub-Signature-256"]}, 400, "missing_event_id"},
		{"hmac forged", "tasks", []byte(`{}`), hmacHeaders("nope", "t1", []byte(`{}`)), 401, "invalid_signature"},
		{"none missing id", "open", []byte(`{"data":{}}`), nil, 400, "missing_event_id"},
		{"none malformed json", "open", []byte(`{"data":`), nil, 400, "malformed_json"},
		{"over source limit", "open", big, nil, 413, "body_too_large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := h.post(t, tt.source, tt.body, tt.headers)
			if a.status != tt.status || a.code() != tt.code {
				t.Fatalf("got %d %q (%v), want %d %q", a.status, a.code(), a.body, tt.status, tt.code)
			}
		})
	}
	if n := h.count(t); n != 0 {
		t.Fatalf("refused requests stored %d events, want 0", n)
	}
}

// The Standard Webhooks vector is verified end to end, at its own time.
func TestStandardVector(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setNow(time.Unix(1614265330, 0).Add(time.Minute))
	a := h.post(t, "std", []byte(`{"test": 2432232314}`), map[string]string{
		"webhook-id":        "msg_p5jXN8AQM9LWM0D4loKWxJek",
		"webhook-timestamp": "1614265330",
		"webhook-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
	})
	if a.status != 200 || a.body["event_id"] != "msg_p5jXN8AQM9LWM0D4loKWxJek" {
		t.Fatalf("got %d %v, want 200 for msg_p5jXN8AQM9LWM0D4loKWxJek", a.status, a.body)
	}
}

func TestConcurrentDuplicatesOneAccepted(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	body := stripeEvent("evt_race", "invoice.paid")
	hdr := stripeHeader(body, stripeSecret, h.clock())
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := h.post(t, "stripe", body, hdr)
			mu.Lock()
			got[fmt.Sprint(a.status, " ", a.body["status"])]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if got["200 accepted"] != 1 || got["200 duplicate"] != 49 {
		t.Fatalf("answers = %v, want 1 accepted and 49 duplicate", got)
	}
}

func TestStoreUnavailable(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.store.Close()
	body := stripeEvent("evt_503", "invoice.paid")
	a := h.post(t, "stripe", body, stripeHeader(body, stripeSecret, h.clock()))
	if a.status != 503 || a.code() != "store_unavailable" {
		t.Fatalf("got %d %q, want 503 store_unavailable", a.status, a.code())
	}
}

// BenchmarkIntake measures a Stripe-signed 1 KiB request through HTTP to a
// durable commit, from many connections.
func BenchmarkIntake(b *testing.B) {
	h := newHarness(b)
	pad := strings.Repeat("x", 900)
	var n sync.Mutex
	i := 0
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.SetParallelism(16)
	b.ReportAllocs()
	b.ResetTimer()
	defer client.CloseIdleConnections() // else the harness's shutdown waits on them
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n.Lock()
			i++
			id := "evt_" + strconv.Itoa(i)
			n.Unlock()
			body := []byte(fmt.Sprintf(`{"id":%q,"type":"invoice.paid","pad":%q}`, id, pad))
			req, _ := http.NewRequest(http.MethodPost, h.url+"/webhooks/stripe", bytes.NewReader(body))
			req.Header.Set("Stripe-Signature", stripeHeader(body, stripeSecret, time.Now())["Stripe-Signature"])
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
}
