package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// pausedRoutes is a PauseApplier that keeps what it is told.
type pausedRoutes struct {
	mu     sync.Mutex
	paused map[string]bool
	stored []string
}

func (r *pausedRoutes) ApplyPause(route string, paused bool, _ string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.paused[route] = paused
	return nil
}

func (r *pausedRoutes) StoredPauses(context.Context) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.stored...), nil
}

func (r *pausedRoutes) is(route string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.paused[route]
}

func watchLog() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

func startPauses(t *testing.T, js natsjs.JetStream, gateway string, to PauseApplier) *Pauses {
	t.Helper()
	p, err := NewPauses(PausesConfig{Gateway: gateway, JetStream: func() natsjs.JetStream { return js },
		Wait: 2 * time.Second, Check: 200 * time.Millisecond}, watchLog())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background(), to); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	return p
}

// setPause asks p until NATS takes it (a server starting again).
func setPause(t *testing.T, p *Pauses, route string, paused bool) {
	t.Helper()
	gatewaytest.WaitFor(t, fmt.Sprintf("pause %s %v", route, paused), 30*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		err := p.SetPause(ctx, route, paused)
		return err == nil, fmt.Sprint(err)
	})
}

func waitPaused(t *testing.T, r *pausedRoutes, route string, paused bool) {
	t.Helper()
	gatewaytest.WaitFor(t, fmt.Sprintf("%s paused %v", route, paused), 30*time.Second, func() (bool, string) {
		return r.is(route) == paused, fmt.Sprint(r.is(route))
	})
}

// A gateway's watch of the pauses outlives a restart of the NATS server
// and a bucket deleted and made anew (its revisions start again); a
// route a gateway's store has paused that the bucket does not know is
// written to it, and applied by the others.
func TestPausesWatchReconnects(t *testing.T) {
	port, dir := gatewaytest.FreePort(t), t.TempDir()
	srv := gatewaytest.RunNATS(t, port, dir)
	js1, js2 := connect(t, srv.ClientURL()), connect(t, srv.ClientURL())
	one := &pausedRoutes{paused: map[string]bool{}}
	two := &pausedRoutes{paused: map[string]bool{}, stored: []string{"old"}}
	startPauses(t, js1, "gw-1", one)
	p2 := startPauses(t, js2, "gw-2", two)
	waitPaused(t, one, "old", true) // gw-2's stored pause, unknown to the bucket

	setPause(t, p2, "r", true)
	if !two.is("r") {
		t.Fatal("the gateway asked did not apply its own pause before SetPause returned")
	}
	waitPaused(t, one, "r", true)

	srv.Shutdown()
	srv.WaitForShutdown()
	srv = gatewaytest.RunNATS(t, port, dir)
	setPause(t, p2, "r", false)
	waitPaused(t, one, "r", false)

	if err := js2.DeleteKeyValue(context.Background(), DefaultPausesBucket); err != nil {
		t.Fatal(err)
	}
	setPause(t, p2, "r", true) // revision 1 of a new bucket
	waitPaused(t, one, "r", true)
	_ = srv
}
