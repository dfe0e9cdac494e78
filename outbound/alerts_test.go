package outbound_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hookgate/hookgate/alert"
)

// alertReceiver is an alerts.url keeping the notices whose Standard
// Webhooks signature verifies.
type alertReceiver struct {
	*httptest.Server
	mu      sync.Mutex
	notices []alert.Notice
	bad     []string
}

func newAlertReceiver(t *testing.T) *alertReceiver {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(routeSecret)
	if err != nil {
		t.Fatal(err)
	}
	r := &alertReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var n alert.Notice
		r.mu.Lock()
		defer r.mu.Unlock()
		if err := wh.Verify(body, req.Header); err != nil {
			r.bad = append(r.bad, err.Error())
		} else if err := json.Unmarshal(body, &n); err != nil {
			r.bad = append(r.bad, err.Error())
		} else {
			r.notices = append(r.notices, n)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Close)
	return r
}

// waitNotice waits for the next notice after the first `after` that
// matches, and returns it with its index.
func (r *alertReceiver) waitNotice(t *testing.T, after int, what string, match func(alert.Notice) bool) (alert.Notice, int) {
	t.Helper()
	var found alert.Notice
	at := -1
	waitFor(t, what, func() (bool, string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.bad) > 0 {
			t.Fatalf("notices that do not verify: %v", r.bad)
		}
		for i := after; i < len(r.notices); i++ {
			if match(r.notices[i]) {
				found, at = r.notices[i], i
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", r.notices)
	})
	return found, at
}

// A route's breaker opening and closing (on a probe, or resumed by an
// operator) and dead letters reach alerts.url, signed.
func TestAlerts(t *testing.T) {
	recv := newAlertReceiver(t)
	var healthy atomic.Bool
	flaky := newDownstream(t, func(w http.ResponseWriter, _ *http.Request, _ int) int {
		if !healthy.Load() {
			w.WriteHeader(500)
			return 500
		}
		w.WriteHeader(200)
		return 200
	})
	doomed := newDownstream(t, func(w http.ResponseWriter, _ *http.Request, _ int) int {
		w.WriteHeader(500)
		return 500
	})
	cfg := baseConfig(t, routeYAML("flaky", flaky.URL,
		", retries: 0, concurrency: 1, breaker_threshold: 2, breaker_cooldown: 1s, schedule: [10ms, 10ms, 10ms, 10ms, 10ms, 10ms, 10ms, 10ms, 10ms, 10ms, 10ms, 10ms]")+
		routeYAML("doomed", doomed.URL, ", retries: 0, breaker_threshold: 0, schedule: [10ms]")) +
		fmt.Sprintf("alerts: {url: %q, secret: %q, dead_letter_interval: 1h}\n", recv.URL+"/alerts", routeSecret)
	g := startGateway(t, cfg)
	for i := range 4 {
		g.send(t, fmt.Sprintf("evt_%d", i), "a")
	}
	route := func(name, typ string) func(alert.Notice) bool {
		return func(n alert.Notice) bool { return n.Data.Route == name && n.Type == typ }
	}
	n, i := recv.waitNotice(t, 0, "breaker opened", route("flaky", alert.TypeBreakerOpened))
	if n.Data.Failures != 2 || n.Data.OpenUntil.IsZero() || n.Text == "" {
		t.Errorf("opened = %+v", n)
	}
	if code, body := g.api(t, http.MethodPost, "/v1/routes/flaky/resume", apiToken); code != 200 {
		t.Fatalf("resume: %d %s", code, body)
	}
	n, i = recv.waitNotice(t, i+1, "breaker closed by resume", route("flaky", alert.TypeBreakerClosed))
	if n.Data.Reason != "resumed" {
		t.Errorf("closed = %+v, want reason resumed", n)
	}
	_, i = recv.waitNotice(t, i+1, "breaker opened again", route("flaky", alert.TypeBreakerOpened))
	healthy.Store(true)
	n, _ = recv.waitNotice(t, i+1, "breaker closed by a probe", route("flaky", alert.TypeBreakerClosed))
	if n.Data.Reason != "probe_succeeded" {
		t.Errorf("closed = %+v, want reason probe_succeeded", n)
	}
	n, _ = recv.waitNotice(t, 0, "dead letters", route("doomed", alert.TypeDeadLetters))
	if n.Data.Count < 1 || n.Data.Count > 4 || n.Data.Since.IsZero() {
		t.Errorf("dead letters = %+v", n)
	}
}
