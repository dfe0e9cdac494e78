package console

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/cluster"
	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// sharedGateway is one gateway's Stats on a StatsBucket: its own
// registry and its intake counter.
type sharedGateway struct {
	*Stats
	accepted prometheus.Counter
}

func newSharedGateway(t *testing.T, js natsjs.JetStream, name string, own bool) sharedGateway {
	t.Helper()
	reg := prometheus.NewRegistry()
	in := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hookgate_inbound_requests_total"}, []string{"source", "outcome"})
	reg.MustRegister(in)
	b, err := cluster.NewStatsBucket(cluster.StatsConfig{
		Gateway: name, Own: own, Wait: 2 * time.Second,
		JetStream: func() natsjs.JetStream { return js },
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return sharedGateway{NewStats(reg, StatsConfig{Shared: b}), in.WithLabelValues("s", "accepted")}
}

// shown is the window's accepted events of source s over the last
// hour, after a sync.
func (g sharedGateway) shown(ctx context.Context) float64 {
	g.sync(ctx)
	return g.Window(time.Hour, time.Minute).IntakeTotal["s accepted"]
}

// Gateways sharing the bucket show the sum of their samples; a gateway
// started again (its memory empty) shows the samples from before; the
// bucket deleted is made again and holds the gateways' samples again; a
// gateway not in cluster mode reads its own samples alone.
func TestStatsShared(t *testing.T) {
	srv := gatewaytest.RunNATS(t, 0, t.TempDir())
	_, js := gatewaytest.ConnectJetStream(t, srv.ClientURL())
	ctx := context.Background()
	now := time.Now()
	a, b := newSharedGateway(t, js, "gw-a", false), newSharedGateway(t, js, "gw-b", false)
	a.accepted.Add(3)
	a.Sample(now.Add(-10 * time.Minute))
	b.accepted.Add(4)
	b.Sample(now.Add(-9 * time.Minute))
	a.sync(ctx)
	b.sync(ctx)
	if got := a.shown(ctx); got != 7 {
		t.Errorf("a shows %v accepted, want 7 (3 on a, 4 on b)", got)
	}
	if got := b.shown(ctx); got != 7 {
		t.Errorf("b shows %v accepted, want 7", got)
	}

	// b started again: counters from 0, memory empty.
	b = newSharedGateway(t, js, "gw-b", false)
	b.accepted.Add(1)
	b.Sample(now.Add(-time.Minute))
	if got := b.shown(ctx); got != 8 {
		t.Errorf("b started again shows %v accepted, want 8 (its earlier 4, a's 3, 1 since)", got)
	}

	// The bucket deleted: made again at the next sync, each gateway's
	// samples written to it again.
	if err := js.DeleteKeyValue(ctx, cluster.DefaultStatsBucket); err != nil {
		t.Fatal(err)
	}
	a.sync(ctx)
	b.sync(ctx)
	if got := a.shown(ctx); got != 8 {
		t.Errorf("a shows %v accepted once the bucket was made again, want 8", got)
	}
	if got := newSharedGateway(t, js, "gw-c", false).shown(ctx); got != 8 {
		t.Errorf("a gateway started after the bucket was made again shows %v accepted, want 8", got)
	}

	// Not in cluster mode: its own samples alone.
	if got := newSharedGateway(t, js, "gw-a", true).shown(ctx); got != 3 {
		t.Errorf("a gateway reading its own samples shows %v accepted, want a's 3", got)
	}
}

// Without NATS the charts are this gateway's samples, at once; they are
// written once NATS answers.
func TestStatsSharedWithoutNATS(t *testing.T) {
	srv := gatewaytest.RunNATS(t, 0, t.TempDir())
	_, up := gatewaytest.ConnectJetStream(t, srv.ClientURL())
	var connected atomic.Bool
	b, err := cluster.NewStatsBucket(cluster.StatsConfig{
		Gateway: "gw-a", Wait: 2 * time.Second,
		JetStream: func() natsjs.JetStream {
			if connected.Load() {
				return up
			}
			return nil
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	in := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hookgate_inbound_requests_total"}, []string{"source", "outcome"})
	reg.MustRegister(in)
	g := sharedGateway{NewStats(reg, StatsConfig{Shared: b}), in.WithLabelValues("s", "accepted")}
	ctx := context.Background()
	g.accepted.Add(2)
	now := time.Now()
	g.Sample(now)
	g.Sample(now) // one sample, written once
	if got := g.shown(ctx); got != 2 {
		t.Errorf("shows %v accepted, want 2", got)
	}
	if len(g.pending) != 1 {
		t.Errorf("%d samples pending, want 1", len(g.pending))
	}
	connected.Store(true)
	g.sync(ctx)
	if len(g.pending) != 0 {
		t.Errorf("%d samples pending once NATS answers, want 0", len(g.pending))
	}
	if got := newSharedGateway(t, up, "gw-b", false).shown(ctx); got != 2 {
		t.Errorf("another gateway shows %v accepted, want a's 2", got)
	}
}

// Another gateway's clock ahead moves neither the windows' end nor what is
// pruned: both follow this gateway's clock, and a sample more than two
// sampling intervals ahead of it is not counted.
func TestStatsClockAhead(t *testing.T) {
	srv := gatewaytest.RunNATS(t, 0, t.TempDir())
	_, js := gatewaytest.ConnectJetStream(t, srv.ClientURL())
	ctx := context.Background()
	now := time.Now()
	a, b := newSharedGateway(t, js, "gw-a", false), newSharedGateway(t, js, "gw-b", false)
	a.accepted.Inc()
	a.Sample(now.Add(-23*time.Hour - 44*time.Minute)) // in the day's window wherever now is in its step
	// One accepted a minute, the last 90 minutes.
	for m := 89; m >= 0; m-- {
		a.accepted.Inc()
		a.Sample(now.Add(-time.Duration(m) * time.Minute))
	}
	b.accepted.Add(100)
	b.Sample(now.Add(50 * time.Minute)) // b's clock 50 minutes ahead
	b.sync(ctx)
	if got := a.shown(ctx); got != 60 {
		t.Errorf("a's hour shows %v accepted, want its 60", got)
	}
	day := a.Window(24*time.Hour, 15*time.Minute)
	if got := day.IntakeTotal["s accepted"]; got != 91 {
		t.Errorf("a's day shows %v accepted, want its 91 (b's sample ahead not counted, none pruned)", got)
	}
	if end := now.Truncate(15 * time.Minute).Add(15 * time.Minute).Unix(); day.To > end {
		t.Errorf("a's day ends at %d, past its clock's step (%d)", day.To, end)
	}
}

// A user allowed to write the bucket but not to read it (no consumers)
// still writes its samples: a failed read stops no write.
func TestStatsPutWhenReadFails(t *testing.T) {
	srv := gatewaytest.RunNATSWith(t, server.Options{StoreDir: t.TempDir(), Users: []*server.User{
		{Username: "admin", Password: "admin-pw"},
		{Username: "writer", Password: "writer-pw", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"$JS.API.CONSUMER.>"}},
		}},
	}})
	connect := func(user, pw string) natsjs.JetStream {
		nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(user, pw), quiet)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := natsjs.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	ctx := context.Background()
	b := newSharedGateway(t, connect("admin", "admin-pw"), "gw-b", false)
	b.accepted.Add(1)
	b.Sample(time.Now())
	b.sync(ctx)
	w := newSharedGateway(t, connect("writer", "writer-pw"), "gw-w", false)
	w.accepted.Add(2)
	w.Sample(time.Now())
	w.sync(ctx)
	if got := b.shown(ctx); got != 3 {
		t.Errorf("another gateway shows %v accepted, want its 1 and the writer's 2", got)
	}
}

// The charts answer while a read of the bucket waits on a NATS that does
// not answer it.
func TestStatsWindowWhileSyncBlocked(t *testing.T) {
	srv := gatewaytest.RunNATSWith(t, server.Options{StoreDir: t.TempDir(), Users: []*server.User{
		{Username: "mute", Password: "mute-pw", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"$JS.API.>"}},
		}},
	}})
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("mute", "mute-pw"), quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	b, err := cluster.NewStatsBucket(cluster.StatsConfig{
		Gateway: "gw-a", Wait: time.Hour, // the API's requests go unanswered until the test ends
		JetStream: func() natsjs.JetStream { return js },
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	in := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hookgate_inbound_requests_total"}, []string{"source", "outcome"})
	reg.MustRegister(in)
	s := NewStats(reg, StatsConfig{Shared: b})
	in.WithLabelValues("s", "accepted").Add(2)
	s.Sample(time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	synced := make(chan struct{})
	go func() {
		defer close(synced)
		s.sync(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-synced
	})
	gatewaytest.WaitFor(t, "a sync to start", 30*time.Second, func() (bool, string) {
		if s.syncMu.TryLock() {
			s.syncMu.Unlock()
			return false, "no sync running"
		}
		return true, ""
	})
	if got := s.Window(time.Hour, time.Minute).IntakeTotal["s accepted"]; got != 2 {
		t.Errorf("the window shows %v accepted, want 2", got)
	}
	select {
	case <-synced:
		t.Error("the sync ended before the window was read: it did not wait on NATS")
	default:
	}
}

// quiet drops the connection's asynchronous errors (the permissions
// violations these tests cause on purpose).
var quiet = nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})

// heldPuts is a StatsBucket whose next Put waits, once written, until
// released: a sample taken meanwhile is taken while its write is in flight.
type heldPuts struct {
	*cluster.StatsBucket
	written, release chan struct{}
}

func (h heldPuts) Put(ctx context.Context, at time.Time, value []byte) error {
	err := h.StatsBucket.Put(ctx, at, value)
	select {
	case h.written <- struct{}{}:
		<-h.release
	default:
	}
	return err
}

// A sample taken in the millisecond of one being written is written too.
func TestSampleWhileItsTimeIsWritten(t *testing.T) {
	srv := gatewaytest.RunNATS(t, 0, t.TempDir())
	_, js := gatewaytest.ConnectJetStream(t, srv.ClientURL())
	b, err := cluster.NewStatsBucket(cluster.StatsConfig{
		Gateway: "gw-a", Wait: 10 * time.Second,
		JetStream: func() natsjs.JetStream { return js },
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	held := heldPuts{b, make(chan struct{}), make(chan struct{})}
	reg := prometheus.NewRegistry()
	in := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hookgate_inbound_requests_total"}, []string{"source", "outcome"})
	reg.MustRegister(in)
	s := NewStats(reg, StatsConfig{Shared: held})
	ctx := context.Background()
	now := time.Now()
	in.WithLabelValues("s", "accepted").Add(3)
	s.Sample(now)
	synced := make(chan struct{})
	go func() {
		defer close(synced)
		s.sync(ctx)
	}()
	<-held.written // the sample of now is written, its put not returned
	in.WithLabelValues("s", "accepted").Add(1)
	s.Sample(now)
	close(held.release)
	<-synced
	s.sync(ctx)
	if got := newSharedGateway(t, js, "gw-b", false).shown(ctx); got != 4 {
		t.Errorf("another gateway shows %v accepted, want 4 (3, then 1 in the same millisecond)", got)
	}
	if got := s.Window(time.Hour, time.Minute).IntakeTotal["s accepted"]; got != 4 {
		t.Errorf("this gateway shows %v accepted, want 4", got)
	}
}

// Flush writes the last sample within its own bound even when the stop's
// context is spent (the drain before it took the whole shutdown).
func TestFlushAfterStopContextSpent(t *testing.T) {
	srv := gatewaytest.RunNATS(t, 0, t.TempDir())
	_, js := gatewaytest.ConnectJetStream(t, srv.ClientURL())
	a := newSharedGateway(t, js, "gw-a", false)
	a.accepted.Add(5)
	spent, cancel := context.WithCancel(context.Background())
	cancel()
	a.Flush(spent)
	if got := newSharedGateway(t, js, "gw-b", false).shown(context.Background()); got != 5 {
		t.Errorf("another gateway shows %v accepted after a's flush on a spent context, want 5", got)
	}
}

// A sync reads every sample the bucket has, however many bounded reads
// it takes.
func TestSyncReadsPastOneRead(t *testing.T) {
	srv := gatewaytest.RunNATS(t, 0, t.TempDir())
	_, js := gatewaytest.ConnectJetStream(t, srv.ClientURL())
	ctx := context.Background()
	a := newSharedGateway(t, js, "gw-a", false)
	now := time.Now()
	const n = 150
	for i := range n {
		a.accepted.Add(1)
		a.Sample(now.Add(-time.Duration(n-i) * 20 * time.Second))
	}
	a.sync(ctx)
	reg := prometheus.NewRegistry()
	b, err := cluster.NewStatsBucket(cluster.StatsConfig{Gateway: "gw-b", Wait: 2 * time.Second, ReadBytes: 1 << 10,
		JetStream: func() natsjs.JetStream { return js }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := sharedGateway{NewStats(reg, StatsConfig{Shared: b}), nil}
	if got := g.shown(ctx); got != n {
		t.Errorf("another gateway shows %v accepted after one sync, want %d", got, n)
	}
}
