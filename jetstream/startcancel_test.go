package jetstream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// nats.go's connect takes no context: to a server that accepts but never
// answers it waits out the connect timeout. Start gives it up as soon as
// its ctx is done (a SIGTERM during start-up), with ctx's error.
func TestStartGivesUpConnectOnCancel(t *testing.T) {
	addr, accepted := gatewaytest.SilentServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := New(Config{URL: "nats://" + addr, Stream: "EVENTS", ConnectTimeout: time.Minute}, quietLog())
	started := make(chan error, 1)
	go func() { started <- b.Start(ctx) }()
	select {
	case <-accepted:
	case err := <-started:
		t.Fatalf("Start returned %v before connecting", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Start never connected to the listener")
	}
	cancel()
	select {
	case err := <-started:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Start = %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Start was still connecting 20 s after its ctx was cancelled (connect timeout 1m)")
	}
	b.Close()
}
