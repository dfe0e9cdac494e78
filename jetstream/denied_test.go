package jetstream

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// A NATS user not allowed to subscribe to JetStream's advisories
// connects and uses JetStream as any other; the gateway says so once,
// naming the subjects and what it costs, however often it connects, and
// nothing else about them.
func TestAdvisoriesDenied(t *testing.T) {
	ctx := context.Background()
	port, dir := gatewaytest.FreePort(t), t.TempDir()
	run := func() *server.Server {
		return gatewaytest.RunNATSWith(t, server.Options{Port: port, StoreDir: dir, Users: []*server.User{{
			Username: "hookgate", Password: "pw",
			Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"denied.>"}},
				Subscribe: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{advisories}},
			},
		}}})
	}
	srv := run()
	var logs gatewaytest.LogBuffer
	b, err := Connect(ctx, Config{URL: fmt.Sprintf("nats://hookgate:pw@127.0.0.1:%d", port), Stream: "EVENTS",
		ConnectTimeout: 5 * time.Second}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	publish := func() {
		t.Helper()
		if err := b.EnsureStream(ctx); err != nil {
			t.Fatalf("stream: %v", err)
		}
		if _, err := b.JetStream().Publish(ctx, SubjectIn(b.Stream(), "src", "t"), []byte("{}")); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	publish()

	// Connected again, the subscriptions are made again, and refused.
	srv.Shutdown()
	srv.WaitForShutdown()
	run()
	gatewaytest.WaitFor(t, "the reconnect's log line", 15*time.Second, func() (bool, string) {
		return strings.Contains(logs.String(), "nats reconnected"), logs.String()
	})
	publish()
	// The server answers in order, and the error handler is called in
	// order: once this publish's refusal is logged, so are the
	// subscriptions' before it.
	if err := b.Conn().Publish("denied.barrier", nil); err != nil {
		t.Fatal(err)
	}
	gatewaytest.WaitFor(t, "the refused publish's log line", 15*time.Second, func() (bool, string) {
		return strings.Contains(logs.String(), "denied.barrier"), logs.String()
	})

	out := logs.String()
	var said []string
	for line := range strings.Lines(out) {
		if strings.Contains(line, "$JS.EVENT.ADVISORY") {
			said = append(said, line)
		}
	}
	if len(said) != 1 {
		t.Fatalf("%d log lines about the advisories, want 1:\n%s", len(said), out)
	}
	for _, want := range []string{"level=WARN", "may not subscribe", "LEADER_ELECTED", "whole timeout", advisories} {
		if !strings.Contains(said[0], want) {
			t.Errorf("the advisories' warning does not say %q: %s", want, said[0])
		}
	}
}
