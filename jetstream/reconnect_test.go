package jetstream

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/store"
)

// A message published while NATS is away is never held for the next
// server: one larger than that server's max payload would make it answer
// -ERR, and nats.go closes such a connection for good (every later
// publish, ack and fetch fails until a restart). Publishing while
// disconnected fails at once instead, and the relay retries it.
func TestNoPublishHeldAcrossReconnect(t *testing.T) {
	ctx := context.Background()
	port := gatewaytest.FreePort(t)
	dir := t.TempDir()
	run := func(maxPayload int32) *server.Server {
		return gatewaytest.RunNATSWith(t, server.Options{Port: port, StoreDir: dir, MaxPayload: maxPayload})
	}
	srv := run(1 << 20)
	b, err := Connect(ctx, Config{URL: fmt.Sprintf("nats://127.0.0.1:%d", port), Stream: "EVENTS",
		ConnectTimeout: 5 * time.Second}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	srv.Shutdown()
	gatewaytest.WaitFor(t, "the client to see the server gone", 10*time.Second, func() (bool, string) {
		return !b.Conn().IsConnected(), b.Conn().Status().String()
	})
	big := &store.Event{Source: "stripe", ID: "evt_big", Type: "invoice.paid", Seq: 1,
		Body: []byte(`"` + strings.Repeat("x", 100<<10) + `"`)}
	if _, err := b.PublishEvent(big); err == nil {
		t.Error("a publish while disconnected was held for the next server")
	}

	run(64 << 10)
	gatewaytest.WaitFor(t, "the client to reconnect and stay connected", 15*time.Second, func() (bool, string) {
		st := b.Conn().Status()
		if st == nats.CLOSED {
			t.Fatalf("connection closed for good after reconnecting: %v", b.Conn().LastError())
		}
		return st == nats.CONNECTED, st.String()
	})
	// The server's -ERR for a flushed oversized message closes the
	// connection shortly after the reconnect: it must still be open.
	small := &store.Event{Source: "stripe", ID: "evt_small", Type: "invoice.paid", Seq: 2, Body: []byte(`{}`)}
	f, err := b.PublishEvent(small)
	if err != nil {
		t.Fatalf("publish after the reconnect: %v (status %s, last error %v)", err, b.Conn().Status(), b.Conn().LastError())
	}
	select {
	case <-f.Ok():
	case err := <-f.Err():
		t.Fatalf("publish after the reconnect: %v (status %s)", err, b.Conn().Status())
	case <-time.After(10 * time.Second):
		t.Fatalf("no ack after the reconnect (status %s, last error %v)", b.Conn().Status(), b.Conn().LastError())
	}
	if st := b.Conn().Status(); st != nats.CONNECTED {
		t.Fatalf("status %s, last error %v", st, b.Conn().LastError())
	}
}
