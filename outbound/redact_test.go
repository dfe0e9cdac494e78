package outbound_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/store"
)

// A transport error quotes the request URL; what is recorded and shown
// keeps only its scheme and host, since downstream URLs often carry a
// secret in their path or query.
func TestTransportErrorsHideURLSecrets(t *testing.T) {
	port := gatewaytest.FreePort(t) // nothing listens there
	url := fmt.Sprintf("http://127.0.0.1:%d/services/T0/B0/pathsecret?token=querysecret", port)
	g := startGateway(t, baseConfig(t, routeYAML("r", url, ", retries: 1, schedule: [1h]")))
	g.send(t, "evt_refused", "invoice.paid")
	d := g.waitState(t, "r", "stripe", "evt_refused", store.StateRetrying)
	attempts, err := g.Store().Attempts(context.Background(), d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(attempts) != 2 {
		t.Fatalf("%d attempts, want 2", len(attempts))
	}
	texts := []string{d.LastError}
	for _, a := range attempts {
		texts = append(texts, a.Error)
	}
	want := fmt.Sprintf("http://127.0.0.1:%d/…", port)
	for _, s := range texts {
		if strings.Contains(s, "secret") || !strings.Contains(s, want) {
			t.Errorf("recorded error %q: want %q and no part of the path or query", s, want)
		}
	}
}

// A redirect's Location is cut the same way.
func TestRedirectLocationHidesURLSecrets(t *testing.T) {
	ds := newDownstream(t, func(w http.ResponseWriter, r *http.Request, n int) int {
		w.Header().Set("Location", "https://hooks.example.com/services/T0/B0/pathsecret?token=querysecret")
		w.WriteHeader(http.StatusMovedPermanently)
		return http.StatusMovedPermanently
	})
	g := startGateway(t, baseConfig(t, routeYAML("r", ds.URL, ", retries: 0, schedule: [1h]")))
	g.send(t, "evt_moved", "invoice.paid")
	d := g.waitState(t, "r", "stripe", "evt_moved", store.StateRetrying)
	attempts, err := g.Store().Attempts(context.Background(), d.ID)
	if err != nil {
		t.Fatal(err)
	}
	const want = "redirect not followed: https://hooks.example.com/…"
	for _, s := range []string{d.LastError, attempts[0].Error} {
		if s != want {
			t.Errorf("recorded error %q, want %q", s, want)
		}
	}
}
