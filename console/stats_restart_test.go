package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hookgate/hookgate/app"
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// A single gateway (embedded NATS) started again on its data_dir still
// charts the day's earlier minutes.
func TestChartsKeptAcrossRestart(t *testing.T) {
	down := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(down.Close)
	dir := t.TempDir()
	start := func() *gateway {
		return startShop(t, dir, "", fmt.Sprintf("{name: ok, sources: [shop], url: %q}", down.URL))
	}
	accepted := func(g *gateway) (bool, string) {
		_, body := g.get(t, opToken, "/console/f/stats.json")
		var stats struct {
			Day struct {
				Intake map[string]float64 `json:"intake_total"`
			} `json:"day"`
		}
		if err := json.Unmarshal([]byte(body), &stats); err != nil {
			return false, body
		}
		return stats.Day.Intake["shop accepted"] == 3, fmt.Sprintf("accepted %v, want 3", stats.Day.Intake["shop accepted"])
	}
	g := start()
	for i := range 3 {
		g.post(t, fmt.Sprintf(`{"id":"e%d","type":"t"}`, i))
	}
	g.ConsoleStats().Sample(time.Now())
	gatewaytest.WaitFor(t, "the chart before the restart", 30*time.Second, func() (bool, string) { return accepted(g) })
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	g = start()
	gatewaytest.WaitFor(t, "the chart after the restart", 30*time.Second, func() (bool, string) { return accepted(g) })
}

// A round that ends while the gateway stops (after its HTTP server has
// stopped) is in the charts after a restart: the last sample is taken once
// the deliveries have stopped.
func TestChartsKeepRoundsOfShutdown(t *testing.T) {
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	down := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		<-release
	}))
	t.Cleanup(down.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	dir := t.TempDir()
	start := func() *gateway {
		return startShop(t, dir, "shutdown_timeout: 60s\n", fmt.Sprintf("{name: slow, sources: [shop], url: %q, timeout: 60s}", down.URL))
	}
	g := start()
	g.post(t, `{"id":"e1","type":"t"}`)
	<-arrived
	stopped := make(chan error, 1)
	go func() { stopped <- g.Stop(context.Background()) }()
	gatewaytest.WaitFor(t, "the HTTP server to stop", 30*time.Second, func() (bool, string) {
		c, err := net.Dial("tcp", g.Addr())
		if err != nil {
			return true, ""
		}
		_ = c.Close()
		return false, "still accepting"
	})
	close(release) // the round ends now, after the HTTP server
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	g = start()
	gatewaytest.WaitFor(t, "the round of the shutdown in the chart after the restart", 30*time.Second, func() (bool, string) {
		_, body := g.get(t, opToken, "/console/f/stats.json")
		var stats struct {
			Day struct {
				Delivery map[string]float64 `json:"delivery_total"`
			} `json:"day"`
		}
		if err := json.Unmarshal([]byte(body), &stats); err != nil {
			return false, body
		}
		n := stats.Day.Delivery["slow succeeded"]
		return n == 1, fmt.Sprintf("rounds of slow %v, want 1", n)
	})
}

// startShop starts a gateway on data_dir dir with the top-level keys extra,
// a source "shop" (no signature) and the one route given (flow YAML).
func startShop(t *testing.T, dir, extra, route string) *gateway {
	t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
listen: "127.0.0.1:0"
data_dir: %q
%sapi: {tokens: [%q]}
sources: [{name: shop, verify: none, id_field: id, type_field: type}]
routes: [%s]
`, dir, extra, opToken, route)), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{App: app.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))}
	if err := g.Start(context.Background()); err != nil {
		_ = g.Stop(context.Background())
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Stop(context.Background()) })
	g.base = "http://" + g.Addr()
	return g
}
