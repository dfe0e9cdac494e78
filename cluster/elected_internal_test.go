package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/jetstream"
	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/store"
)

// The waits below are a minute long; each test's deadline is 20 s, so
// what it waits for happening at all shows the wait ended at the
// election, not at its timer.
const (
	longWait     = time.Minute
	electionWait = 20 * time.Second
)

// electedFixture is a broker on a 3-node NATS cluster (its elections,
// what UntilElected takes) and its JetStream as a gateway sees it: nil
// while down is set, as while NATS is not connected.
type electedFixture struct {
	b    *jetstream.Broker
	down atomic.Bool
	log  *slog.Logger
	logs *gatewaytest.LogBuffer
}

func newElectedFixture(t *testing.T) *electedFixture {
	t.Helper()
	nc := gatewaytest.RunNATSCluster(t, 3)
	logs := &gatewaytest.LogBuffer{}
	f := &electedFixture{logs: logs, log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	b, err := jetstream.Connect(context.Background(), jetstream.Config{URL: nc.URL, Stream: "EVENTS", ConnectTimeout: 5 * time.Second}, f.log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	f.b = b
	return f
}

func (f *electedFixture) jetStream() natsjs.JetStream {
	if f.down.Load() {
		return nil
	}
	return f.b.JetStream()
}

// logged waits for the log to say each of lines.
func (f *electedFixture) logged(t *testing.T, lines ...string) {
	t.Helper()
	for _, line := range lines {
		gatewaytest.WaitFor(t, "the log line "+line, 30*time.Second, func() (bool, string) {
			return strings.Contains(f.logs.String(), line), f.logs.String()
		})
	}
}

// stepDown makes stream's leader step down: its group elects another.
func (f *electedFixture) stepDown(t *testing.T, stream string) {
	t.Helper()
	resp, err := f.b.Conn().Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil, 10*time.Second)
	if err != nil {
		t.Fatalf("step down %s: %v", stream, err)
	}
	if strings.Contains(string(resp.Data), `"error"`) {
		t.Fatalf("step down %s: %s", stream, resp.Data)
	}
}

// The records publisher's and applier's waits after a failure (NATS not
// connected) end at the records stream's leader election: once NATS is
// back and the stream's leader steps down, the round's record is
// published and read back well before their minute-long waits end.
func TestRecordsWaitsEndAtElection(t *testing.T) {
	ctx := context.Background()
	f := newElectedFixture(t)
	st, err := store.Open(ctx, store.Config{Path: filepath.Join(t.TempDir(), "db")}, f.log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r, err := NewRecords(st, RecordsConfig{Gateway: "gw-a", Replicas: 3, TTL: time.Hour,
		JetStream: f.jetStream, UntilElected: f.b.UntilElectedIn}, f.log)
	if err != nil {
		t.Fatal(err)
	}
	r.pubWait.first, r.pubWait.most = longWait, longWait
	r.followWait.first, r.followWait.most = longWait, longWait
	gatewaytest.WaitFor(t, "the records stream", 30*time.Second, func() (bool, string) {
		err := r.Ensure(ctx)
		return err == nil, fmt.Sprint(err)
	})
	seq, _, err := st.AdoptEvent(ctx, &store.Event{Source: "s", ID: "e1", Type: "t", Body: []byte("{}")}, 0)
	if err != nil {
		t.Fatal(err)
	}
	d := &store.Delivery{EventSeq: seq, Route: "r", Source: "s", EventID: "e1", EventType: "t",
		IdempotencyKey: outbound.IdempotencyKey("r", "s", "e1"), State: store.StateSucceeded, Rounds: 1, LastStatus: 200}
	if err := st.RecordClusterRound(ctx, d, []store.Attempt{{StartedAt: time.Now(), Status: 200}},
		store.ClusterRound{Origin: "gw-a", FirstAttempt: 1, Attempts: 1, Version: 1}); err != nil {
		t.Fatal(err)
	}

	f.down.Store(true)
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop(ctx) })
	f.logged(t, "cannot publish round records", "cannot read the records stream")
	f.down.Store(false)
	f.stepDown(t, DefaultRecordsStream)

	gatewaytest.WaitFor(t, "the record published and read back", electionWait, func() (bool, string) {
		out, err := st.CountRecordsOut(ctx)
		pos, perr := st.RecordsPosition(ctx)
		return out == 0 && pos == 1, fmt.Sprintf("records_out %d (%v), position %d (%v)", out, err, pos, perr)
	})
}

// The pauses watch's wait after a failure (NATS not connected) ends at
// the bucket's leader election: once NATS is back and the bucket's
// leader steps down, a pause another gateway wrote is applied well
// before its minute-long wait ends.
func TestPausesWaitEndsAtElection(t *testing.T) {
	ctx := context.Background()
	f := newElectedFixture(t)
	other, err := NewPauses(PausesConfig{Gateway: "gw-b", Replicas: 3, JetStream: f.b.JetStream,
		UntilElected: f.b.UntilElectedIn}, f.log)
	if err != nil {
		t.Fatal(err)
	}
	setPause(t, other, "r", true) // makes the bucket

	f.down.Store(true)
	p, err := NewPauses(PausesConfig{Gateway: "gw-a", Replicas: 3, JetStream: f.jetStream,
		Connected: func() bool { return !f.down.Load() }, UntilElected: f.b.UntilElectedIn}, f.log)
	if err != nil {
		t.Fatal(err)
	}
	p.wait.first, p.wait.most = longWait, longWait
	routes := &pausedRoutes{paused: map[string]bool{}}
	if err := p.Start(ctx, routes); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(ctx) })
	f.logged(t, "cannot watch the bucket")
	f.down.Store(false)
	f.stepDown(t, "KV_"+DefaultPausesBucket)

	gatewaytest.WaitFor(t, "the pause applied", electionWait, func() (bool, string) {
		return routes.is("r"), "not paused"
	})
}
