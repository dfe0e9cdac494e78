package jetstream

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/store"

	"github.com/hookgate/hookgate/internal/gatewaytest"
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

func streamMsgs(t testing.TB, b *Broker) uint64 {
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
	b, err := Connect(context.Background(), Config{URL: addr, Retention: "limits"}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r := NewRelay(b, st, RelayConfig{Poll: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}, quietLog())
	r.Start(context.Background())
	defer r.Stop()

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
		m.Header.Get(HeaderEventID) != "evt_a0" || m.Header.Get(HeaderSource) != "stripe" ||
		string(m.Data) != `{"id":"evt_a0"}` {
		t.Fatalf("first message = %s %v %q", m.Subject, m.Header, m.Data)
	}
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
	b, err := Connect(context.Background(), Config{URL: srv.ClientURL(), Retention: "limits",
		DuplicateWindow: 100 * time.Millisecond}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ob := &refusingOutbox{Store: st}
	ob.refuse.Store(6) // with backoffs of 50–100ms, retries span several windows
	r := NewRelay(b, ob, RelayConfig{Poll: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}, quietLog())
	for i := range 10 {
		claim(t, st, "stripe", fmt.Sprintf("evt_%d", i))
	}
	r.Start(context.Background())
	defer r.Stop()
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
	b, err := Connect(context.Background(), Config{URL: srv.ClientURL(), Retention: "limits"}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ob := &refusingOutbox{Store: st}
	ob.refuse.Store(1 << 20)
	// The first failure's backoff (50ms) doubles up to a minute: after a
	// few refusals the relay waits out the test in its backoff.
	r := NewRelay(b, ob, RelayConfig{Poll: 20 * time.Millisecond, MaxBackoff: time.Minute}, quietLog())
	for i := range 10 {
		claim(t, st, "stripe", fmt.Sprintf("evt_%d", i))
	}
	r.Start(context.Background())
	waitFor(t, "published, refused a few times", 10*time.Second, func() (bool, string) {
		n := streamMsgs(t, b)
		return n == 10 && ob.refuse.Load() < 1<<20-3, fmt.Sprintf("stream %d, refusals %d", n, 1<<20-ob.refuse.Load())
	})
	ob.refuse.Store(0)
	r.Stop()
	if _, n, err := st.Counts(context.Background()); err != nil || n != 0 {
		t.Fatalf("outbox after stop = %d (%v), want 0", n, err)
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
