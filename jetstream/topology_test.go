package jetstream

import (
	"context"
	"slices"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

func consumerNames(t *testing.T, b *Broker) []string {
	t.Helper()
	s, err := b.JetStream().Stream(context.Background(), b.Stream())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	l := s.ConsumerNames(context.Background())
	for n := range l.Name() {
		names = append(names, n)
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// EnsureTopology creates the declared consumers, deletes the owned ones no
// longer declared, leaves the others alone, and puts a deleted stream
// back with its consumers.
func TestEnsureTopology(t *testing.T) {
	ctx := context.Background()
	b, err := Connect(ctx, Config{StoreDir: t.TempDir()}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	durable := func(name string) natsjs.ConsumerConfig {
		return natsjs.ConsumerConfig{Durable: name, AckPolicy: natsjs.AckExplicitPolicy, AckWait: time.Minute}
	}
	for _, name := range []string{"route_gone", "tasks", "tasksother", "someone_else"} {
		if _, err := b.EnsureConsumer(ctx, durable(name)); err != nil {
			t.Fatal(err)
		}
	}
	b.Declare(ConsumerSet{Consumers: []natsjs.ConsumerConfig{durable("route_a"), durable("route_b")},
		Owned: []string{"route_*", "tasks"}})
	if err := b.EnsureTopology(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"route_a", "route_b", "someone_else", "tasksother"}
	if got := consumerNames(t, b); !slices.Equal(got, want) {
		t.Fatalf("consumers = %v, want %v", got, want)
	}

	before := b.StreamCreated()
	if err := b.JetStream().DeleteStream(ctx, b.Stream()); err != nil {
		t.Fatal(err)
	}
	b.ForgetStream()
	if err := b.EnsureTopology(ctx); err != nil {
		t.Fatal(err)
	}
	if got := consumerNames(t, b); !slices.Equal(got, []string{"route_a", "route_b"}) {
		t.Fatalf("consumers of the new stream = %v, want the declared ones", got)
	}
	state, err := b.StreamState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if state.Created.Equal(before) || !b.StreamCreated().Equal(state.Created) {
		t.Fatalf("stream created %v, before %v, as the broker saw it %v: want a new creation time, seen",
			state.Created, before, b.StreamCreated())
	}
}

// Stop is safe twice and without Start; a stopped broker does not start.
func TestBrokerLifecycle(t *testing.T) {
	ctx := context.Background()
	unstarted := New(Config{StoreDir: t.TempDir()}, quietLog())
	if err := unstarted.Stop(ctx); err != nil {
		t.Fatalf("Stop without Start: %v", err)
	}
	if err := unstarted.Start(ctx); err == nil {
		t.Fatal("Start after Stop succeeded")
	}

	b := New(Config{StoreDir: t.TempDir()}, quietLog())
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatalf("a second Start: %v", err)
	}
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(ctx); err != nil {
		t.Fatalf("a second Stop: %v", err)
	}
	if b.Conn().IsConnected() {
		t.Fatal("connected after Stop")
	}
}
