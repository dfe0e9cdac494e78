package outbound_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stripe/stripe-go/v83/webhook"

	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/store"
)

// storeBeforeStart puts events in the gateway's store before it starts, as
// events accepted by an earlier build that did not refuse them at intake.
func storeBeforeStart(t *testing.T, yaml string, evs ...*store.Event) *gateway {
	t.Helper()
	return beforeStart(t, yaml, func(st *store.Store) {
		for _, ev := range evs {
			if dup, err := st.Claim(context.Background(), ev); err != nil || dup {
				t.Fatalf("claim %s: dup=%v err=%v", ev.ID, dup, err)
			}
		}
	})
}

// beforeStart runs fn on the gateway's store, then starts the gateway.
func beforeStart(t *testing.T, yaml string, fn func(st *store.Store)) *gateway {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	withStore(t, cfg.Store.Path, fn)
	return restart(t, cfg)
}

// withStore runs fn on the store at path (its gateway stopped), opened
// and closed around it.
func withStore(t *testing.T, path string, fn func(st *store.Store)) {
	t.Helper()
	st, err := store.Open(context.Background(), store.Config{Path: path}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	fn(st)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// A stored event whose type is too long for a subject is published (under
// a hash token), reaches the routes whose globs match its exact type and
// no other, and delivery goes on after it; sent now, through the
// gateway's HTTP server, the same type is refused.
func TestStoredLongTypeRoutedByExactType(t *testing.T) {
	ds := newDownstream(t, nil)
	long := "invoice." + strings.Repeat("x", 4052)
	g := storeBeforeStart(t, baseConfig(t,
		routeYAML("inv", ds.URL+"/inv", `, events: ["invoice.*"]`)+
			routeYAML("cus", ds.URL+"/cus", `, events: ["customer.*"]`)+
			routeYAML("all", ds.URL+"/all", "")),
		&store.Event{Source: "stripe", ID: "evt_long", Type: long, ContentType: "application/json",
			Body: []byte(`{"id":"evt_long"}`), ReceivedAt: time.Now()})
	g.waitState(t, "inv", "stripe", "evt_long", store.StateSucceeded)
	g.waitState(t, "all", "stripe", "evt_long", store.StateSucceeded)

	// The same type sent now, signed, is refused at the door.
	body := []byte(`{"id":"evt_long_again","type":"` + long + `"}`)
	p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: stripeSecret})
	req, _ := http.NewRequest(http.MethodPost, "http://"+g.Addr()+"/webhooks/stripe", bytes.NewReader(body))
	req.Header.Set("Stripe-Signature", p.Header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !bytes.Contains(answer, []byte(`"invalid_event_type"`)) {
		t.Fatalf("a signed event with a 4,060-character type: %d %s, want 400 invalid_event_type", resp.StatusCode, answer)
	}
	g.send(t, "evt_after", "customer.created")
	g.waitState(t, "cus", "stripe", "evt_after", store.StateSucceeded)
	if d := g.delivery(t, "cus", "stripe", "evt_long"); d != nil {
		t.Errorf("cus, whose glob does not match the type, has a delivery: %+v", *d)
	}
	for _, r := range ds.requests() {
		if r.eventID == "evt_long" && r.eventType != long {
			t.Errorf("%s: X-Hookgate-Event-Type of %d bytes, want the exact %d", r.path, len(r.eventType), len(long))
		}
	}
	if !g.Broker().Conn().IsConnected() {
		t.Fatalf("NATS connection %s", g.Broker().Conn().Status())
	}
}

// A stored event that cannot make a valid HTTP request (a control
// character in its type or Content-Type) is dead after its first round,
// with the reason on the attempt; nothing is sent and nothing is retried.
func TestUnsendableEventDeadAtOnce(t *testing.T) {
	ds := newDownstream(t, nil)
	g := storeBeforeStart(t, baseConfig(t, routeYAML("r", ds.URL, ", retries: 3, schedule: [20ms, 20ms, 20ms]")),
		&store.Event{Source: "stripe", ID: "evt_type", Type: "invoice\x01paid", ContentType: "application/json",
			Body: []byte(`{}`), ReceivedAt: time.Now()},
		&store.Event{Source: "stripe", ID: "evt_ct", Type: "invoice.paid", ContentType: "text/plain\x00",
			Body: []byte(`{}`), ReceivedAt: time.Now()})
	for id, header := range map[string]string{"evt_type": "X-Hookgate-Event-Type", "evt_ct": "Content-Type"} {
		d := g.waitState(t, "r", "stripe", id, store.StateDead)
		if d.Attempts != 1 || d.Rounds > 1 || !strings.Contains(d.LastError, "invalid header field value") ||
			!strings.Contains(d.LastError, header) {
			t.Errorf("%s: delivery = %+v, want dead after 1 attempt naming %s", id, *d, header)
		}
		as, err := g.Store().Attempts(context.Background(), d.ID)
		if err != nil || len(as) != 1 || !strings.Contains(as[0].Error, "invalid header field value") {
			t.Errorf("%s: attempts = %+v, %v; want one, with the reason", id, as, err)
		}
	}
	g.send(t, "evt_ok", "invoice.paid")
	g.waitState(t, "r", "stripe", "evt_ok", store.StateSucceeded)
	for _, r := range ds.requests() {
		if r.eventID != "evt_ok" {
			t.Errorf("a request was sent for %s", r.eventID)
		}
	}
}

// What a downstream answers is bounded in what an attempt records: a
// malformed status line of 256 KiB (quoted by net/http, 1 MiB of escapes)
// or a redirect to a 200 KiB host name leave at most maxErrorKept bytes of
// error text in the attempt, the delivery and the log line.
func TestDownstreamErrorTextBounded(t *testing.T) {
	const maxErrorKept = 1 << 10
	url := gatewaytest.RawServer(t, func(path string) []byte {
		switch path {
		case "/line":
			return append(bytes.Repeat([]byte{0xff}, 256<<10), "\r\n\r\n"...)
		case "/location":
			return []byte("HTTP/1.1 302 Found\r\nLocation: http://" + strings.Repeat("a", 200<<10) +
				".example/\r\nContent-Length: 0\r\n\r\n")
		}
		return []byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
	})
	g := startGateway(t, baseConfig(t,
		routeYAML("line", url+"/line", ", retries: 1, schedule: [1h]")+
			routeYAML("location", url+"/location", ", retries: 1, schedule: [1h]")))
	g.send(t, "evt_1", "invoice.paid")
	for _, route := range []string{"line", "location"} {
		var d *store.Delivery
		waitFor(t, route+": a round recorded", func() (bool, string) {
			d = g.delivery(t, route, "stripe", "evt_1")
			if d == nil {
				return false, "no delivery"
			}
			return d.Attempts == 2, fmt.Sprintf("%d attempts", d.Attempts)
		})
		if d.LastError == "" || len(d.LastError) > maxErrorKept || !utf8.ValidString(d.LastError) {
			t.Errorf("%s: last_error of %d bytes (valid UTF-8 %v), want 1 to %d: %.200q…", route, len(d.LastError),
				utf8.ValidString(d.LastError), maxErrorKept, d.LastError)
		}
		as, err := g.Store().Attempts(context.Background(), d.ID)
		if err != nil || len(as) != 2 {
			t.Fatalf("%s: attempts %d, %v", route, len(as), err)
		}
		for _, a := range as {
			if a.Error == "" || len(a.Error) > maxErrorKept {
				t.Errorf("%s: attempt %d's error of %d bytes, want 1 to %d: %.200q…", route, a.Attempt, len(a.Error),
					maxErrorKept, a.Error)
			}
		}
	}
}

// A delivery's attempts grow with every round an operator or a task
// client asks for, without bound; an answer shows the latest 100 (the
// delivery's attempts field counts them all), not every one ever made.
func TestAttemptListBounded(t *testing.T) {
	const made, shown = 300, 100
	ds := newDownstream(t, nil)
	cfg, err := config.Parse([]byte(baseConfig(t, routeYAML("r", ds.URL, ""))), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{Path: cfg.Store.Path}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ev := &store.Event{Source: "stripe", ID: "evt_many", Type: "invoice.paid", ContentType: "application/json",
		Body: []byte(`{}`), ReceivedAt: time.Now()}
	if _, err := st.Claim(ctx, ev); err != nil {
		t.Fatal(err)
	}
	as := make([]store.Attempt, made)
	for i := range as {
		as[i] = store.Attempt{StartedAt: time.Now(), Status: 500, Response: bytes.Repeat([]byte("x"), 2<<10)}
	}
	d := &store.Delivery{EventSeq: ev.Seq, Route: "r", Source: "stripe", EventID: ev.ID, IdempotencyKey: "k",
		State: store.StateDead, Rounds: made, LastStatus: 500}
	if err := st.RecordRound(ctx, d, as); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	g := restart(t, cfg)

	code, body := g.api(t, http.MethodGet, "/v1/deliveries/"+store.DeliveryUID("r", "stripe", "evt_many"), apiToken)
	var got struct {
		Attempts    int `json:"attempts"`
		AttemptList []struct {
			Attempt int `json:"attempt"`
		} `json:"attempt_list"`
	}
	if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil {
		t.Fatalf("GET delivery: %d %v %.300s", code, err, body)
	}
	n := len(got.AttemptList)
	if got.Attempts != made || n != shown || got.AttemptList[0].Attempt != made-shown+1 || got.AttemptList[n-1].Attempt != made {
		first, last := 0, 0
		if n > 0 {
			first, last = got.AttemptList[0].Attempt, got.AttemptList[n-1].Attempt
		}
		t.Fatalf("attempts %d, attempt_list of %d (%d to %d); want %d, the latest %d (%d to %d)",
			got.Attempts, n, first, last, made, shown, made-shown+1, made)
	}
	// The console's event page: the same attempts, numbered as they are.
	code, body = g.api(t, http.MethodGet, "/console/f/event?source=stripe&id=evt_many", apiToken)
	if code != 200 || strings.Count(body, "<li><time>") != shown || !strings.Contains(body, `<ol class="timeline" start="201">`) ||
		!strings.Contains(body, "300 attempts (the latest 100 shown)") {
		t.Fatalf("console event page: %d, %d attempts shown, want %d from 201, counted as 300:\n%.2000s", code,
			strings.Count(body, "<li><time>"), shown, body)
	}
}

// A downstream's response headers are read up to 1 MiB, as a task's are:
// past it the attempt fails (net/http would read 10 MiB, and quote a
// malformed line of it four times over in its error).
func TestDownstreamHeadersBounded(t *testing.T) {
	url := gatewaytest.RawServer(t, func(string) []byte {
		return []byte("HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", 2<<20) + "\r\nContent-Length: 0\r\n\r\n")
	})
	g := startGateway(t, baseConfig(t, routeYAML("r", url, ", retries: 0, schedule: [1h]")))
	g.send(t, "evt_1", "invoice.paid")
	var d *store.Delivery
	waitFor(t, "a round recorded", func() (bool, string) {
		d = g.delivery(t, "r", "stripe", "evt_1")
		if d == nil {
			return false, "no delivery"
		}
		return d.Attempts > 0, fmt.Sprintf("%+v", *d)
	})
	if d.State == store.StateSucceeded || !strings.Contains(d.LastError, "exceeded 1048576 bytes") {
		t.Fatalf("a 2 MiB response header: %s, %q; want failed, headers exceeded 1048576 bytes", d.State, d.LastError)
	}
}
