package app

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hookgate/hookgate/alert"
	"github.com/hookgate/hookgate/internal/gatewaytest"
)

const alertSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// With NATS down the outbox ages: past alerts.outbox_age a signed notice
// says so, and another once NATS is back and the outbox drained.
func TestOutboxAlerts(t *testing.T) {
	wh, err := standardwebhooks.NewWebhook(alertSecret)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var types []string
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var n alert.Notice
		mu.Lock()
		defer mu.Unlock()
		if err := wh.Verify(body, r.Header); err != nil {
			types = append(types, "unverified: "+err.Error())
		} else if err := json.Unmarshal(body, &n); err != nil {
			types = append(types, "bad: "+err.Error())
		} else {
			types = append(types, n.Type)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer recv.Close()
	seen := func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), types...) }

	natsDir := t.TempDir()
	port := freePort(t)
	srv := runNATS(t, port, natsDir)
	cfg := testConfig(t, fmt.Sprintf(`
nats: {url: "nats://127.0.0.1:%d", connect_timeout: 2s}
alerts: {url: %q, secret: %q, outbox_age: 1s}
`, port, recv.URL, alertSecret))
	a := startApp(t, cfg)
	srv.Shutdown()
	srv.WaitForShutdown()
	if code, body := postStripe(t, a, "evt_outbox_alert"); code != 200 {
		t.Fatalf("intake with NATS down: %d %s", code, body)
	}
	waitFor(t, "outbox.stalled", func() (bool, string) {
		s := seen()
		return len(s) == 1 && s[0] == alert.TypeOutboxStalled, fmt.Sprint(s)
	})
	runNATS(t, port, natsDir)
	waitFor(t, "outbox.recovered", func() (bool, string) {
		s := seen()
		return len(s) == 2 && s[1] == alert.TypeOutboxRecovered, fmt.Sprint(s)
	})
}

// In cluster mode a dead letter is reported once, by the gateway that
// recorded the delivery dead: the notices' counts add up to the dead
// letters, whichever gateway took each event.
func TestClusterDeadLetterAlertsOnce(t *testing.T) {
	wh, err := standardwebhooks.NewWebhook(alertSecret)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	reported := 0
	var bad []string
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var n alert.Notice
		mu.Lock()
		defer mu.Unlock()
		if err := wh.Verify(body, r.Header); err != nil {
			bad = append(bad, err.Error())
		} else if err := json.Unmarshal(body, &n); err != nil {
			bad = append(bad, err.Error())
		} else if n.Type == alert.TypeDeadLetters && n.Data.Route == "billing" {
			reported += n.Data.Count
		}
	}))
	defer recv.Close()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) }))
	defer down.Close()

	nc := gatewaytest.RunNATSCluster(t, 3)
	var gws []*App
	for range 2 {
		gws = append(gws, startApp(t, testConfig(t, fmt.Sprintf(`
nats: {url: %q, replicas: 3, duplicate_window: 1s, connect_timeout: 5s}
cluster: {enabled: true, claim_timeout: 10s}
routes:
  - {name: billing, sources: [stripe], url: %q, retries: 0, breaker_threshold: 0, schedule: [10ms]}
alerts: {url: %q, secret: %q, dead_letter_interval: 1ms}
`, nc.URL, down.URL, recv.URL, alertSecret))))
	}
	const events = 6
	for i := range events {
		if code, body := postStripe(t, gws[i%2], fmt.Sprintf("evt_dead_%d", i)); code != 200 {
			t.Fatalf("intake: %d %s", code, body)
		}
	}
	dead := func() float64 {
		sum := 0.0
		for _, a := range gws {
			if v := value(scrape(t, a, ""), "hookgate_delivery_rounds_total", "route", "billing", "outcome", "dead"); v > 0 {
				sum += v
			}
		}
		return sum
	}
	waitFor(t, "every delivery dead, reported", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		if len(bad) > 0 {
			t.Fatalf("notices that do not verify: %v", bad)
		}
		return reported >= events, fmt.Sprintf("%d reported", reported)
	})
	if d := dead(); d != events {
		t.Fatalf("%v deliveries recorded dead across the gateways, want %d", d, events)
	}
	mu.Lock()
	defer mu.Unlock()
	if reported != events {
		t.Fatalf("%d dead letters reported, want %d", reported, events)
	}
}
