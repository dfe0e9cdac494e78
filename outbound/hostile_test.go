package outbound_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v83/webhook"

	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/store"
)

// storeBeforeStart puts events in the gateway's store before it starts, as
// events accepted by an earlier build that did not refuse them at intake.
func storeBeforeStart(t *testing.T, yaml string, evs ...*store.Event) *gateway {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	st, err := store.Open(context.Background(), store.Config{Path: cfg.Store.Path}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if dup, err := st.Claim(context.Background(), ev); err != nil || dup {
			t.Fatalf("claim %s: dup=%v err=%v", ev.ID, dup, err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return restart(t, cfg)
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
