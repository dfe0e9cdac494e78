package jetstream

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestSubject(t *testing.T) {
	tests := []struct{ source, typ, want string }{
		{"stripe", "invoice.paid", "webhooks.stripe.invoice.paid"},
		{"stripe", "", "webhooks.stripe._"},
		{"gh", "push", "webhooks.gh.push"},
		{"x", "a b>c*d", "webhooks.x.a_b_c_d"},
		{"x", "a..b.", "webhooks.x.a._.b._"},
		{"x", ".lead", "webhooks.x._.lead"},
		{"x", "ünï", "webhooks.x.__n__"},
		{"_task", "task", "tasks.task"},
	}
	for _, tt := range tests {
		if got := Subject(tt.source, tt.typ); got != tt.want {
			t.Errorf("Subject(%q, %q) = %q, want %q", tt.source, tt.typ, got, tt.want)
		}
	}
}

func TestEmbeddedServer(t *testing.T) {
	b, err := Connect(context.Background(), Config{StoreDir: t.TempDir()}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.JetStream().Stream(context.Background(), "HOOKGATE_EVENTS"); err != nil {
		t.Fatalf("stream: %v", err)
	}
	b.Close()
	b.Close() // a second close is harmless
}

// A JetStream that cannot start is an error at once, not a hang.
func TestEmbeddedServerFailsClearly(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Connect(context.Background(), Config{StoreDir: filepath.Join(file, "js"), ConnectTimeout: 5 * time.Second}, quietLog())
	if err == nil || !strings.Contains(err.Error(), "jetstream") {
		t.Fatalf("Connect with an unusable store = %v, want a jetstream error", err)
	}
}

// A server URL nats.go cannot parse is an error that does not quote it:
// it may carry a token or password.
func TestConnectErrorHidesURL(t *testing.T) {
	const secret = "s3cretTokenABCDEFGH"
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	_, err := Connect(context.Background(), Config{URL: "nats://" + secret + "@127.0.0.1:42x22", ConnectTimeout: 2 * time.Second}, log)
	if err == nil {
		t.Fatal("Connect succeeded, want an error")
	}
	if strings.Contains(err.Error(), secret) || strings.Contains(logged.String(), secret) {
		t.Errorf("the URL's token is shown:\nerr: %v\nlog: %s", err, logged.String())
	}
	if !strings.Contains(err.Error(), "jetstream: connect") || !strings.Contains(err.Error(), "invalid port") {
		t.Errorf("err = %v, want jetstream: connect with the parse error's reason", err)
	}
}

// A message handed back just before a shutdown is delivered again at once
// after the restart, not after its AckWait: the server keeps no memory of
// a plain NAK across a restart.
func TestHandBackSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	consumer := natsjs.ConsumerConfig{Durable: "route", AckPolicy: natsjs.AckExplicitPolicy, AckWait: time.Minute}

	b, err := Connect(ctx, Config{StoreDir: dir}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cons, err := b.JetStream().CreateOrUpdateConsumer(ctx, b.Stream(), consumer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.JetStream().Publish(ctx, Subject("stripe", "invoice.paid"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, natsjs.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	msg := <-batch.Messages()
	if msg == nil {
		t.Fatal("the published message was not delivered")
	}
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := b.HandBack(hctx, msg); err != nil {
		t.Fatalf("HandBack: %v", err)
	}
	b.Close()

	b, err = Connect(ctx, Config{StoreDir: dir}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cons, err = b.JetStream().Consumer(ctx, b.Stream(), consumer.Durable)
	if err != nil {
		t.Fatal(err)
	}
	// Well within the minute of AckWait.
	batch, err = cons.Fetch(1, natsjs.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	msg = <-batch.Messages()
	if msg == nil {
		t.Fatalf("after the restart, the handed-back message was not delivered again within 10s (AckWait %s)", consumer.AckWait)
	}
	md, err := msg.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := md.NumDelivered, uint64(2); got != want {
		t.Errorf("NumDelivered = %d, want %d", got, want)
	}
}
