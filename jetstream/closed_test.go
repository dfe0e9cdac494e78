package jetstream

import (
	"context"
	"fmt"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/store"
)

// NATS closes the broker's connection for good (here an -ERR nats.go does
// not know, sent by a proxy in front of the server): the broker connects
// anew, and publishing, consumers and hand-backs work again through it.
func TestConnectsAnewAfterClosed(t *testing.T) {
	ctx := context.Background()
	srv := gatewaytest.RunNATS(t, 0, t.TempDir())
	proxy := gatewaytest.RunErrProxy(t, srv.Addr().String())
	b, err := Connect(ctx, Config{URL: proxy.URL(), Stream: "EVENTS", ConnectTimeout: 5 * time.Second}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cc := natsjs.ConsumerConfig{Durable: "r", AckPolicy: natsjs.AckExplicitPolicy}
	if _, err := b.EnsureConsumer(ctx, cc); err != nil {
		t.Fatal(err)
	}
	publish(t, b, 1)

	old := b.Conn()
	if n := proxy.SendErr("some unknown error"); n != 1 {
		t.Fatalf("the -ERR went to %d clients", n)
	}
	gatewaytest.WaitFor(t, "the connection closed", 10*time.Second, func() (bool, string) {
		return old.IsClosed(), old.Status().String()
	})
	gatewaytest.WaitFor(t, "a new connection", 10*time.Second, func() (bool, string) {
		nc := b.Conn()
		return nc != old && nc.IsConnected(), nc.Status().String()
	})
	publish(t, b, 2)
	cons, err := b.EnsureConsumer(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		msg, err := cons.Next(natsjs.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("fetch through the new connection: %v", err)
		}
		if err := msg.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	publish(t, b, 3)
	msg, err := cons.Next(natsjs.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.HandBack(ctx, msg); err != nil {
		t.Fatalf("hand back through the new connection: %v", err)
	}
}

// The broker's own Close is not a connection to replace.
func TestCloseDoesNotConnectAnew(t *testing.T) {
	ctx := context.Background()
	srv := gatewaytest.RunNATS(t, 0, t.TempDir())
	b, err := Connect(ctx, Config{URL: srv.ClientURL(), Stream: "EVENTS", ConnectTimeout: 5 * time.Second}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	nc := b.Conn()
	b.Close()
	if b.Conn() != nc || !nc.IsClosed() {
		t.Fatalf("after Close: a new connection (%s) or the old one open (%s)", b.Conn().Status(), nc.Status())
	}
	// The server sees no client, now or after a while a renewal would take.
	gatewaytest.WaitFor(t, "no client on the server", 10*time.Second, func() (bool, string) {
		return srv.NumClients() == 0, fmt.Sprint(srv.NumClients())
	})
	time.Sleep(time.Second)
	if n := srv.NumClients(); n != 0 {
		t.Fatalf("%d clients after the broker's Close", n)
	}
}

func publish(t *testing.T, b *Broker, seq int64) {
	t.Helper()
	ev := &store.Event{Source: "stripe", ID: fmt.Sprint("evt_", seq), Type: "invoice.paid", Seq: seq, Body: []byte(`{}`)}
	f, err := b.PublishEvent(ev)
	if err != nil {
		t.Fatalf("publish %d: %v (status %s, last error %v)", seq, err, b.Conn().Status(), b.Conn().LastError())
	}
	select {
	case <-f.Ok():
	case err := <-f.Err():
		t.Fatalf("publish %d: %v", seq, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("no ack for %d", seq)
	}
}

// NATS closes every connection right after it is made: the broker connects
// anew with a backoff, not in a tight loop, and once the server behaves
// again it is connected again. Close ends a renewal.
func TestConnectsAnewWithBackoff(t *testing.T) {
	ctx := context.Background()
	srv := gatewaytest.RunNATS(t, 0, t.TempDir())
	proxy := gatewaytest.RunErrProxy(t, srv.Addr().String())
	b, err := Connect(ctx, Config{URL: proxy.URL(), Stream: "EVENTS", ConnectTimeout: 5 * time.Second}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	proxy.ErrEveryConnection("some unknown error")
	proxy.SendErr("some unknown error")
	gatewaytest.WaitFor(t, "3 connections closed by the server", 20*time.Second, func() (bool, string) {
		return proxy.Accepted() >= 4, fmt.Sprint(proxy.Accepted())
	})
	// A slower machine only makes fewer: without a backoff, hundreds.
	from := proxy.Accepted()
	time.Sleep(2 * time.Second)
	if n := proxy.Accepted() - from; n > 6 {
		t.Fatalf("%d connections in 2s: connecting anew in a tight loop", n)
	}
	proxy.ErrEveryConnection("")
	gatewaytest.WaitFor(t, "connected again", 30*time.Second, func() (bool, string) {
		nc := b.Conn()
		return nc.IsConnected(), nc.Status().String()
	})
	publish(t, b, 1)
}

// Close while the broker waits to connect anew returns at once, and
// nothing connects after it.
func TestCloseEndsARenewal(t *testing.T) {
	ctx := context.Background()
	srv := gatewaytest.RunNATS(t, 0, t.TempDir())
	proxy := gatewaytest.RunErrProxy(t, srv.Addr().String())
	b, err := Connect(ctx, Config{URL: proxy.URL(), Stream: "EVENTS", ConnectTimeout: 5 * time.Second}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	proxy.ErrEveryConnection("some unknown error")
	proxy.SendErr("some unknown error")
	// The waits before connecting anew: 0, 250ms, 500ms, 1s, 2s, 4s...
	gatewaytest.WaitFor(t, "5 connections closed by the server", 30*time.Second, func() (bool, string) {
		return proxy.Accepted() >= 6, fmt.Sprint(proxy.Accepted())
	})
	closed := make(chan struct{})
	go func() { b.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(15 * time.Second):
		t.Fatal("Close did not return")
	}
	n := proxy.Accepted()
	time.Sleep(time.Second)
	if m := proxy.Accepted(); m != n {
		t.Fatalf("%d connections after Close", m-n)
	}
}
