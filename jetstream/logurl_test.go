package jetstream

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// A nats.url with token auth (nats://TOKEN@host) keeps the token out of
// the log when the connection comes back, both after a reconnect and
// after connecting anew; the server's host:port is logged instead.
func TestConnectionLogsHideURLToken(t *testing.T) {
	const token = "s3cretNatsToken0123456789"
	port := gatewaytest.FreePort(t)
	dir := t.TempDir()
	run := func() *server.Server {
		return gatewaytest.RunNATSWith(t, server.Options{Port: port, StoreDir: dir, Authorization: token})
	}
	srv := run()
	// Through a proxy, whose -ERR makes NATS close the connection for
	// good (a connection anew).
	proxy := gatewaytest.RunErrProxy(t, fmt.Sprintf("127.0.0.1:%d", port))
	host := strings.TrimPrefix(proxy.URL(), "nats://")
	var logs gatewaytest.LogBuffer
	b, err := Connect(context.Background(), Config{URL: "nats://" + token + "@" + host,
		Stream: "EVENTS", ConnectTimeout: 5 * time.Second}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	srv.Shutdown()
	gatewaytest.WaitFor(t, "the client to see the server gone", 10*time.Second, func() (bool, string) {
		return !b.Conn().IsConnected(), b.Conn().Status().String()
	})
	run()
	gatewaytest.WaitFor(t, "the reconnect's log line", 15*time.Second, func() (bool, string) {
		return strings.Contains(logs.String(), "nats reconnected"), logs.String()
	})

	old := b.Conn()
	if n := proxy.SendErr("some unknown error"); n != 1 {
		t.Fatalf("the -ERR went to %d clients", n)
	}
	gatewaytest.WaitFor(t, "the connection anew's log line", 15*time.Second, func() (bool, string) {
		return b.Conn() != old && strings.Contains(logs.String(), "nats connected anew"), logs.String()
	})

	out := logs.String()
	if strings.Contains(out, token) {
		t.Errorf("the NATS token is in the log:\n%s", out)
	}
	for _, msg := range []string{"nats reconnected", "nats connected anew"} {
		if !strings.Contains(out, fmt.Sprintf("msg=%q server=%s", msg, host)) {
			t.Errorf("no %q with server=%s in the log:\n%s", msg, host, out)
		}
	}
}

// nats.go's asynchronous errors (here a slow consumer) go to the log.
func TestAsyncErrorsLogged(t *testing.T) {
	var logs gatewaytest.LogBuffer
	b, err := Connect(context.Background(), Config{StoreDir: t.TempDir(), Stream: "EVENTS"},
		slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	block := make(chan struct{})
	defer close(block)
	sub, err := b.Conn().Subscribe("slow", func(*nats.Msg) { <-block })
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(1, 1<<20); err != nil {
		t.Fatal(err)
	}
	gatewaytest.WaitFor(t, "the slow consumer's error in the log", 10*time.Second, func() (bool, string) {
		for range 10 {
			_ = b.Conn().Publish("slow", []byte("x"))
		}
		return strings.Contains(logs.String(), "nats async error"), logs.String()
	})
}

// A stream's health text names no file: /readyz/delivery answers without
// a token.
func TestHidePaths(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"JetStream stream 'HOOKGATE_EVENTS' write error: open /var/lib/hookgate/jetstream/jetstream/$G/streams/HOOKGATE_EVENTS/msgs/1.blk: no space left on device",
			"JetStream stream 'HOOKGATE_EVENTS' write error: open <path>: no space left on device"},
		{"JetStream stream 'HOOKGATE_EVENTS' write error: open data/jetstream/jetstream/$G/streams/HOOKGATE_EVENTS/msgs/1.blk: no space left on device",
			"JetStream stream 'HOOKGATE_EVENTS' write error: open <path>: no space left on device"},
		{"JetStream stream 'S' is not current", "JetStream stream 'S' is not current"},
		{`error "/a b/c"`, `error "<path> <path>"`},
	} {
		if got := hidePaths(tc.in); got != tc.want {
			t.Errorf("hidePaths(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
