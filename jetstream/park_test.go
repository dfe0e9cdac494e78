package jetstream

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/store"
)

func TestRefused(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nats.ErrMaxPayload, true},
		{fmt.Errorf("publish: %w", nats.ErrMaxPayload), true},
		{nats.ErrBadSubject, true},
		{&natsjs.APIError{ErrorCode: natsjs.JSErrCodeStreamMessageExceedsMaximum, Code: 400}, true},
		{nats.ErrTimeout, false},
		{natsjs.ErrNoStreamResponse, false},
		{nats.ErrNoResponders, false},
		{nats.ErrConnectionClosed, false},
		{nats.ErrDisconnected, false},
		{context.DeadlineExceeded, false},
		{errors.New("nats: timeout waiting for ack"), false},
	} {
		if got := Refused(tt.err); got != tt.want {
			t.Errorf("Refused(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// An event over the server's max payload is parked and the events behind
// it are published, in order; nothing is lost.
func TestRelayParksRefusedEvent(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: t.TempDir(), NoSigs: true, NoLog: true, MaxPayload: 8 << 10})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(srv.Shutdown)
	st, err := store.Open(context.Background(), store.Config{Path: filepath.Join(t.TempDir(), "db")}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b, err := Connect(context.Background(), Config{URL: srv.ClientURL(), Retention: "limits"}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if got := b.MaxPayload(); got != 8<<10 {
		t.Fatalf("MaxPayload = %d, want the server's 8192", got)
	}
	var parked atomic.Int32
	r := NewRelay(b, st, RelayConfig{Poll: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		OnParked: func(ev *store.Event, err error) {
			if ev.ID == "evt_big" && errors.Is(err, nats.ErrMaxPayload) {
				parked.Add(1)
			}
		}}, quietLog())
	claim(t, st, "stripe", "evt_1")
	if _, err := st.Claim(context.Background(), &store.Event{Source: "stripe", ID: "evt_big", Type: "invoice.paid",
		Body: []byte(strings.Repeat("x", 16<<10)), ReceivedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= 5; i++ {
		claim(t, st, "stripe", fmt.Sprintf("evt_%d", i))
	}
	r.Start(context.Background())
	defer r.Stop()
	waitFor(t, "the outbox empty", 10*time.Second, func() (bool, string) {
		_, n, err := st.Counts(context.Background())
		return err == nil && n == 0, fmt.Sprintf("outbox %d, err %v", n, err)
	})
	if n := streamMsgs(t, b); n != 5 {
		t.Fatalf("stream holds %d messages, want the 5 small events", n)
	}
	ps, err := st.Parked(context.Background(), 0, 10)
	if err != nil || len(ps) != 1 || ps[0].ID != "evt_big" || !strings.Contains(ps[0].Reason, "maximum payload") {
		t.Fatalf("parked = %+v, %v; want evt_big, maximum payload exceeded", ps, err)
	}
	if parked.Load() != 1 {
		t.Fatalf("OnParked called %d times for evt_big", parked.Load())
	}
}
