package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/jetstream"
	"github.com/hookgate/hookgate/store"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func runServer(t testing.TB, port int, dir string) *server.Server {
	t.Helper()
	return gatewaytest.RunNATS(t, port, dir)
}

func waitFor(t testing.TB, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	gatewaytest.WaitFor(t, what, timeout, cond)
}

func streamMsgs(t testing.TB, b *jetstream.Broker) uint64 {
	t.Helper()
	s, err := b.JetStream().Stream(context.Background(), b.Stream())
	if err != nil {
		return 0
	}
	info, err := s.Info(context.Background())
	if err != nil {
		return 0
	}
	return info.State.Msgs
}

func claim(t testing.TB, st *store.Store, source, id string) {
	t.Helper()
	dup, err := st.Claim(context.Background(), &store.Event{Source: source, ID: id, Type: "invoice.paid",
		Body: []byte(`{"id":"` + id + `"}`), ReceivedAt: time.Now()})
	if err != nil || dup {
		t.Fatalf("claim %s: dup=%v err=%v", id, dup, err)
	}
}

// Events stay safe in the store while NATS is down and are published, once
// each, when it is back; a re-publish is dropped by the duplicate window.
func TestRelayAcrossNATSOutage(t *testing.T) {
	natsDir := t.TempDir()
	srv := runServer(t, 0, natsDir)
	port := srv.Addr().(*net.TCPAddr).Port
	addr := srv.ClientURL()
	dbPath := filepath.Join(t.TempDir(), "db")
	st, err := store.Open(context.Background(), store.Config{Path: dbPath}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b, err := jetstream.Connect(context.Background(), jetstream.Config{URL: addr, Retention: "limits"}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r := New(st, b, Config{Poll: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}, quietLog())
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Stop(context.Background()) }()

	outbox := func() (bool, string) {
		_, n, err := st.Counts(context.Background())
		return err == nil && n == 0, fmt.Sprintf("outbox %d, err %v", n, err)
	}
	for i := 0; i < 10; i++ {
		claim(t, st, "stripe", fmt.Sprintf("evt_a%d", i))
	}
	r.Notify()
	waitFor(t, "first 10 published", 10*time.Second, outbox)

	srv.Shutdown()
	srv.WaitForShutdown()
	for i := 0; i < 10; i++ {
		claim(t, st, "stripe", fmt.Sprintf("evt_b%d", i))
	}
	r.Notify()
	if _, n, _ := st.Counts(context.Background()); n != 10 {
		t.Fatalf("outbox while NATS is down = %d, want 10", n)
	}

	runServer(t, port, natsDir)
	waitFor(t, "outage events published", 20*time.Second, outbox)
	if got := streamMsgs(t, b); got != 20 {
		t.Fatalf("stream holds %d messages, want 20", got)
	}

	// Put everything back in the outbox: the relay publishes it all again and
	// the duplicate window drops every copy.
	db, err := sql.Open("sqlite3", dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("INSERT INTO outbox (seq) SELECT seq FROM published; DELETE FROM published"); err != nil {
		t.Fatal(err)
	}
	r.Notify()
	waitFor(t, "re-published", 10*time.Second, outbox)
	if got := streamMsgs(t, b); got != 20 {
		t.Fatalf("after re-publish the stream holds %d messages, want 20", got)
	}

	// Headers carry the event's identity.
	s, _ := b.JetStream().Stream(context.Background(), b.Stream())
	m, err := s.GetMsg(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != "webhooks.stripe.invoice.paid" || m.Header.Get("Nats-Msg-Id") != "stripe:evt_a0" ||
		m.Header.Get(jetstream.HeaderEventID) != "evt_a0" || m.Header.Get(jetstream.HeaderSource) != "stripe" ||
		string(m.Data) != `{"id":"evt_a0"}` {
		t.Fatalf("first message = %s %v %q", m.Subject, m.Header, m.Data)
	}
}

// refusingOutbox is the real store, refusing the record of acks while
// refuse > 0 (as a full disk would).
type refusingOutbox struct {
	*store.Store
	refuse atomic.Int32
}

func (o *refusingOutbox) MarkPublished(ctx context.Context, acks []store.Published, at time.Time) error {
	if o.refuse.Add(-1) >= 0 {
		return errors.New("disk I/O error")
	}
	return o.Store.MarkPublished(ctx, acks, at)
}

// Acks whose record failed are recorded when the store is back, not
// published again: retries that outlast the duplicate window would
// otherwise put a new copy of every event in the stream each time.
func TestRelayRecordsAcksAfterStoreRefused(t *testing.T) {
	srv := runServer(t, 0, t.TempDir())
	st, err := store.Open(context.Background(), store.Config{Path: filepath.Join(t.TempDir(), "db")}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b, err := jetstream.Connect(context.Background(), jetstream.Config{URL: srv.ClientURL(), Retention: "limits",
		DuplicateWindow: 100 * time.Millisecond}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ob := &refusingOutbox{Store: st}
	ob.refuse.Store(6) // with backoffs of 50–100ms, retries span several windows
	r := New(ob, b, Config{Poll: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}, quietLog())
	for i := range 10 {
		claim(t, st, "stripe", fmt.Sprintf("evt_%d", i))
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Stop(context.Background()) }()
	waitFor(t, "outbox recorded", 10*time.Second, func() (bool, string) {
		_, n, err := st.Counts(context.Background())
		return err == nil && n == 0 && ob.refuse.Load() < 0, fmt.Sprintf("outbox %d, refusals left %d, err %v", n, ob.refuse.Load(), err)
	})
	if got := streamMsgs(t, b); got != 10 {
		t.Fatalf("stream holds %d messages, want 10 (one per event)", got)
	}
}

// A stop records what JetStream acknowledged but the store refused, if the
// store takes it now: else the next start publishes it again.
func TestRelayStopRecordsRefusedAcks(t *testing.T) {
	srv := runServer(t, 0, t.TempDir())
	st, err := store.Open(context.Background(), store.Config{Path: filepath.Join(t.TempDir(), "db")}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b, err := jetstream.Connect(context.Background(), jetstream.Config{URL: srv.ClientURL(), Retention: "limits"}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ob := &refusingOutbox{Store: st}
	ob.refuse.Store(1 << 20)
	// The first failure's backoff (50ms) doubles up to a minute: after a
	// few refusals the relay waits out the test in its backoff.
	r := New(ob, b, Config{Poll: 20 * time.Millisecond, MaxBackoff: time.Minute}, quietLog())
	for i := range 10 {
		claim(t, st, "stripe", fmt.Sprintf("evt_%d", i))
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "published, refused a few times", 10*time.Second, func() (bool, string) {
		n := streamMsgs(t, b)
		return n == 10 && ob.refuse.Load() < 1<<20-3, fmt.Sprintf("stream %d, refusals %d", n, 1<<20-ob.refuse.Load())
	})
	ob.refuse.Store(0)
	if err := r.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, n, err := st.Counts(context.Background()); err != nil || n != 0 {
		t.Fatalf("outbox after stop = %d (%v), want 0", n, err)
	}
}

// An event over the server's max payload is parked and the events behind
// it are published, in order; nothing is lost.
func TestRelayParksRefusedEvent(t *testing.T) {
	srv := gatewaytest.RunNATSWith(t, server.Options{StoreDir: t.TempDir(), MaxPayload: 8 << 10})
	st, err := store.Open(context.Background(), store.Config{Path: filepath.Join(t.TempDir(), "db")}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b, err := jetstream.Connect(context.Background(), jetstream.Config{URL: srv.ClientURL(), Retention: "limits"}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if got := b.MaxPayload(); got != 8<<10 {
		t.Fatalf("MaxPayload = %d, want the server's 8192", got)
	}
	var parked atomic.Int32
	r := New(st, b, Config{Poll: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
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
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Stop(context.Background()) }()
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

// claimingPublisher is what cluster mode puts in front of the broker: it
// sees every event before it is published.
type claimingPublisher struct {
	*jetstream.Broker
	claimed sync.Map // event ID → true
}

func (p *claimingPublisher) PublishEvent(ev *store.Event) (natsjs.PubAckFuture, error) {
	p.claimed.Store(ev.ID, true)
	return p.Broker.PublishEvent(ev)
}

// The relay publishes through its Publisher.
func TestRelayPublishesThroughPublisher(t *testing.T) {
	ctx := context.Background()
	st, b := storeAndBroker(t)
	pub := &claimingPublisher{Broker: b}
	r := New(st, b, Config{Poll: 20 * time.Millisecond, Publisher: pub}, quietLog())
	for i := range 5 {
		claim(t, st, "stripe", fmt.Sprintf("evt_%d", i))
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Stop(ctx) }()
	waitFor(t, "the outbox empty", 10*time.Second, func() (bool, string) {
		_, n, err := st.Counts(ctx)
		return err == nil && n == 0, fmt.Sprintf("outbox %d, err %v", n, err)
	})
	for i := range 5 {
		if _, ok := pub.claimed.Load(fmt.Sprintf("evt_%d", i)); !ok {
			t.Errorf("evt_%d was published without going through the Publisher", i)
		}
	}
}

// storeAndBroker is a store in the test's directory and an embedded
// broker keeping every message (limits retention).
func storeAndBroker(t *testing.T) (*store.Store, *jetstream.Broker) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{Path: filepath.Join(t.TempDir(), "db")}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b, err := jetstream.Connect(ctx, jetstream.Config{StoreDir: t.TempDir(), Retention: "limits"}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return st, b
}
