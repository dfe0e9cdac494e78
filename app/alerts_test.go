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
