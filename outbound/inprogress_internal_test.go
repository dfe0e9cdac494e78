package outbound

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// A round longer than AckWait keeps its message: no redelivery while the
// progress signals run, and none after stop and ack.
func TestInProgressKeepsMessage(t *testing.T) {
	srv := gatewaytest.RunNATS(t, -1, t.TempDir())
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	// Signals every third of AckWait: on a loaded machine a signal may come
	// hundreds of milliseconds late and still be in time.
	const ackWait = time.Second
	cons, err := js.CreateConsumer(ctx, "S", natsjs.ConsumerConfig{Durable: "c", AckPolicy: natsjs.AckExplicitPolicy, AckWait: ackWait})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s.1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	msg, err := cons.Next(natsjs.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	keep := keepInProgress(msg, ackWait/3)
	// A pull waits three AckWaits: without the signals the message is
	// redelivered to it.
	batch, err := cons.Fetch(1, natsjs.FetchMaxWait(3*ackWait))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		md, _ := m.Metadata()
		t.Fatalf("message redelivered while kept (delivery %d)", md.NumDelivered)
	}
	keep.stop()
	if err := msg.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	keep.stop() // twice is fine
	ci, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ci.NumRedelivered != 0 || ci.NumAckPending != 0 {
		t.Fatalf("after ack: redelivered %d, ack pending %d; want 0, 0", ci.NumRedelivered, ci.NumAckPending)
	}
}
