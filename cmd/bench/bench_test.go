package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/signature"
	"github.com/hookgate/hookgate/store"
)

// The generated events are valid Stripe-shaped JSON of the asked size,
// the same for the same ID, and signed as the gateway verifies.
func TestEventsAreSignedStripeEvents(t *testing.T) {
	v, err := signature.NewStripe([]string{benchSecret}, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	w := &worker{mac: hmac.New(sha256.New, []byte(benchSecret))}
	for _, size := range []int{512, 1024, 4096} {
		body := appendEvent(nil, "evt_abc123", size)
		if len(body) != size {
			t.Errorf("size %d: body is %d bytes", size, len(body))
		}
		var ev struct{ ID, Type string }
		if err := json.Unmarshal(body, &ev); err != nil || ev.ID != "evt_abc123" || ev.Type == "" {
			t.Fatalf("body %s: %v %+v", body, err, ev)
		}
		if again := appendEvent(nil, "evt_abc123", size); string(again) != string(body) {
			t.Error("the same ID gave another body")
		}
		now := time.Now()
		sig := string(w.sign(nil, now.Unix(), body))
		if err := v.Verify(func(string) string { return sig }, body, now); err != nil {
			t.Errorf("signature refused: %v", err)
		}
	}
}

func TestNum(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 1234567.4: "1,234,567", -1500: "-1,500"} {
		if got := num(in); got != want {
			t.Errorf("num(%v) = %q, want %q", in, got, want)
		}
	}
}

// -random-ids: IDs of the asked shape, all distinct, not in sending order.
func TestRandomIDs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[string]bool{}
	sorted := true
	prev := ""
	for range 1000 {
		id := randomID(rng)
		if len(id) != 28 || id[:4] != "evt_" {
			t.Fatalf("randomID() = %q, want evt_ and 24 characters", id)
		}
		if seen[id] {
			t.Fatalf("randomID() repeated %q", id)
		}
		seen[id] = true
		sorted = sorted && id > prev
		prev = id
	}
	if sorted {
		t.Error("1,000 random IDs came in ascending order")
	}
}

// -prefill stores events as the gateway would have: published (not in the
// outbox), each delivered once, found by the store's own reads.
func TestPrefill(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "hookgate.db")
	const n = 120
	if err := prefill(ctx, path, n, 512, true, "bench"); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, store.Config{Path: path}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if got, err := st.OutboxBacklog(ctx); err != nil || got != 0 {
		t.Fatalf("OutboxBacklog() = %d, %v; want 0", got, err)
	}
	ds, err := st.ListDeliveries(ctx, store.DeliveryFilter{Route: "bench", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != n {
		t.Fatalf("%d deliveries, want %d", len(ds), n)
	}
	for _, d := range ds {
		ev, err := st.GetEvent(ctx, d.Source, d.EventID)
		if err != nil {
			t.Fatalf("GetEvent(%s, %s): %v", d.Source, d.EventID, err)
		}
		if ev.Seq != d.EventSeq || len(ev.Body) != 512 || !json.Valid(ev.Body) {
			t.Fatalf("event %s: seq %d (delivery's %d), %d-byte body, want the delivery's seq and a 512-byte JSON body",
				ev.ID, ev.Seq, d.EventSeq, len(ev.Body))
		}
		var body struct{ Type string }
		if err := json.Unmarshal(ev.Body, &body); err != nil || ev.Type != body.Type || d.EventType != body.Type {
			t.Fatalf("event %s: type %q, delivery's %q, body's %q; want them the same", ev.ID, ev.Type, d.EventType, body.Type)
		}
		status, err := st.DeliveryStatus(ctx, "bench", d.EventSeq, d.Source, d.EventID)
		if err != nil || status.State != store.StateSucceeded || status.Attempts != 1 {
			t.Fatalf("DeliveryStatus(%d) = %+v, %v; want succeeded after 1 attempt", d.EventSeq, status, err)
		}
	}
}

// The generated config is one the gateway loads, with the store and NATS
// settings the flags asked for.
func TestWriteConfig(t *testing.T) {
	o := &options{logLevel: "info", routeConcurrency: 8, batchMax: 128, walMaxMB: 64, walZeroFill: true, natsSync: "always", dupWindow: "2s",
		idExpr: `body.id + ":" + body.type`, filter: `!body.livemode && type != 'x'`}
	path, err := writeConfig(t.TempDir(), "127.0.0.1:1", "http://127.0.0.1:2/hook", o)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("the gateway refuses the generated config: %v", err)
	}
	if got := [2]int{cfg.Store.BatchMax, cfg.Store.WALMaxMB}; got != [2]int{128, 64} || !cfg.Store.WALZeroFill {
		t.Errorf("store batch_max, wal_max_mb = %v, wal_zero_fill %v; want [128 64], true", got, cfg.Store.WALZeroFill)
	}
	if !cfg.NATS.SyncAlways || cfg.NATS.DuplicateWindow != 2*time.Second {
		t.Errorf("nats sync_always, duplicate_window = %v, %v; want true, 2s", cfg.NATS.SyncAlways, cfg.NATS.DuplicateWindow)
	}
	if len(cfg.Routes) != 1 || cfg.Routes[0].Concurrency != 8 {
		t.Errorf("routes = %+v, want one of concurrency 8", cfg.Routes)
	}
	if cfg.Sources[0].IDExpr != o.idExpr || cfg.Routes[0].Filter != o.filter {
		t.Errorf("id_expr %q, filter %q; want %q, %q", cfg.Sources[0].IDExpr, cfg.Routes[0].Filter, o.idExpr, o.filter)
	}
}

// The WAL restart row is read from the gateway's own /metrics.
func TestWALRestartsScrape(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "hookgate_store_wal_restart_seconds", Buckets: prometheus.ExponentialBuckets(0.001, 2, 12),
	})
	reg.MustRegister(h)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	before, err := scrapeWALRestarts(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	if got := before.String(); got != "none" {
		t.Errorf("no restarts: %q, want none", got)
	}
	h.Observe(0.003)
	after, err := scrapeWALRestarts(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	h.Observe(0.100)
	h.Observe(0.200)
	end, err := scrapeWALRestarts(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := end.since(after).String(), "2, mean 150.0 ms, longest ≤ 256.0 ms"; got != want {
		t.Errorf("since: %q, want %q", got, want)
	}
	if got, want := end.String(), "3, mean 101.0 ms, longest ≤ 256.0 ms"; got != want {
		t.Errorf("whole: %q, want %q", got, want)
	}
	h.Observe(5)
	if w, _ := scrapeWALRestarts(context.Background(), addr); !strings.Contains(w.String(), "longest over the largest bucket") {
		t.Errorf("past the buckets: %q", w.String())
	}
}
