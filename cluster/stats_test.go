package cluster_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/app"
	"github.com/hookgate/hookgate/cluster"
	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// chartTotals are the totals of the console's hour window on a: accepted
// events of source s, successful rounds of route p.
func chartTotals(t *testing.T, a *app.App) (accepted, rounds float64, state string) {
	t.Helper()
	var stats struct {
		Hour struct {
			Intake   map[string]float64 `json:"intake_total"`
			Delivery map[string]float64 `json:"delivery_total"`
		} `json:"hour"`
	}
	if code := apiGet(t, a, "/console/f/stats.json", &stats); code != http.StatusOK {
		return 0, 0, fmt.Sprintf("status %d", code)
	}
	accepted, rounds = stats.Hour.Intake["s accepted"], stats.Hour.Delivery["p succeeded"]
	return accepted, rounds, fmt.Sprintf("accepted %v, rounds of p %v", accepted, rounds)
}

// waitCharts waits until the console of each of show shows accepted
// events and as many rounds of p; every gateway of sample takes a sample
// now and then meanwhile (as it does each minute).
func waitCharts(t *testing.T, what string, accepted float64, sample []*app.App, show ...*app.App) {
	t.Helper()
	var last time.Time
	gatewaytest.WaitFor(t, what, 60*time.Second, func() (bool, string) {
		if time.Since(last) > 500*time.Millisecond {
			for _, g := range sample {
				g.ConsoleStats().Sample(time.Now())
			}
			last = time.Now()
		}
		state := ""
		ok := true
		for i, g := range show {
			acc, rounds, s := chartTotals(t, g)
			state += fmt.Sprintf("gateway %d: %s; ", i, s)
			ok = ok && acc == accepted && rounds == accepted
		}
		return ok, state
	})
}

// The console of either gateway charts the cluster's traffic: the events
// each took and the rounds each ran, summed; a gateway started again
// still shows the day's earlier minutes, its own and the other's.
func TestConsoleChartsAcrossGateways(t *testing.T) {
	urls := runNATSCluster(t, 3)
	d := newRouteDownstream(t)
	a := pauseGateway(t, "a", urls, d.URL, t.TempDir())
	dirB := t.TempDir()
	b := pauseGateway(t, "b", urls, d.URL, dirB)
	onA := postEvents(t, a, "on-a", 3)
	onB := postEvents(t, b, "on-b", 4)
	waitDelivered(t, d, "p", append(onA, onB...))
	waitCharts(t, "both consoles to show 7 accepted and 7 rounds of p", 7, []*app.App{a, b}, a, b)
	if ttl, replicas := bucketConfig(t, connectJS(t, urls[0]), cluster.DefaultStatsBucket); ttl != cluster.DefaultStatsTTL || replicas != 3 {
		t.Errorf("%s: ttl %v, %d replicas; want %v, 3 (nats.replicas)", cluster.DefaultStatsBucket, ttl, replicas, cluster.DefaultStatsTTL)
	}

	if err := b.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	b = pauseGateway(t, "b", urls, d.URL, dirB)
	waitCharts(t, "b started again to show the 7 from before", 7, []*app.App{a, b}, b)
	more := postEvents(t, b, "after", 2)
	waitDelivered(t, d, "p", more)
	waitCharts(t, "both consoles to show 9 accepted and 9 rounds of p", 9, []*app.App{a, b}, a, b)
}

// Two deployments on one NATS (each its own nats.stream) chart their own
// traffic alone: each console reads its deployment's samples, written
// after the other deployment's, and shows none of the other's.
func TestConsoleChartsPerDeployment(t *testing.T) {
	url := gatewaytest.RunNATS(t, 0, t.TempDir()).ClientURL()
	gateway := func(name, stream string) *app.App {
		return runGateway(t, name, fmt.Sprintf(`
listen: "127.0.0.1:0"
data_dir: %q
nats: {url: %q, stream: %s}
cluster: {enabled: true}
api: {tokens: [%q]}
sources:
  - {name: s, verify: none, id_field: id, type_field: type}
`, t.TempDir(), url, stream, apiToken))
	}
	// wait waits until each gateway of show charts accepted events, every
	// one sampling now and then meanwhile.
	wait := func(what string, accepted float64, show ...*app.App) {
		t.Helper()
		var last time.Time
		gatewaytest.WaitFor(t, what, 60*time.Second, func() (bool, string) {
			if time.Since(last) > 500*time.Millisecond {
				for _, g := range show {
					g.ConsoleStats().Sample(time.Now())
				}
				last = time.Now()
			}
			ok, state := true, ""
			for i, g := range show {
				acc, _, s := chartTotals(t, g)
				state += fmt.Sprintf("gateway %d: %s; ", i, s)
				ok = ok && acc == accepted
			}
			return ok, state
		})
	}
	s1, s2 := gateway("s1", "STAGING_EVENTS"), gateway("s2", "STAGING_EVENTS")
	postEvents(t, s1, "s1", 4)
	postEvents(t, s2, "s2", 6)
	wait("staging's consoles to show its 10 accepted", 10, s1, s2)
	p1, p2 := gateway("p1", "HOOKGATE_EVENTS"), gateway("p2", "HOOKGATE_EVENTS")
	postEvents(t, p1, "p1", 3)
	postEvents(t, p2, "p2", 2)
	wait("production's consoles to show its 5 accepted, none of staging's", 5, p1, p2)
	postEvents(t, s2, "s2-more", 1)
	wait("staging's consoles to show its 11 accepted, none of production's", 11, s1, s2)
}

// Every bucket and the records stream are named by the deployment's
// stream, names a bucket and a subject's token can have; the default
// stream keeps the names of before.
func TestDeploymentNames(t *testing.T) {
	for _, c := range []struct {
		stream string
		want   cluster.Names
	}{
		{"", cluster.Names{"HOOKGATE_CLAIMS", "HOOKGATE_DELIVERIES", "HOOKGATE_ROUTES", "HOOKGATE_STATS",
			"HOOKGATE_TAKES", "HOOKGATE_RECORDS", "hookgate.records"}},
		{"HOOKGATE_EVENTS", cluster.Names{"HOOKGATE_CLAIMS", "HOOKGATE_DELIVERIES", "HOOKGATE_ROUTES", "HOOKGATE_STATS",
			"HOOKGATE_TAKES", "HOOKGATE_RECORDS", "hookgate.records"}},
		{"STAGING_EVENTS", cluster.Names{"HOOKGATE_CLAIMS_STAGING_EVENTS", "HOOKGATE_DELIVERIES_STAGING_EVENTS",
			"HOOKGATE_ROUTES_STAGING_EVENTS", "HOOKGATE_STATS_STAGING_EVENTS", "HOOKGATE_TAKES_STAGING_EVENTS", "HOOKGATE_RECORDS_STAGING_EVENTS",
			"hookgate.records_STAGING_EVENTS"}},
		{"ev-2", cluster.Names{"HOOKGATE_CLAIMS_ev-2", "HOOKGATE_DELIVERIES_ev-2", "HOOKGATE_ROUTES_ev-2",
			"HOOKGATE_STATS_ev-2", "HOOKGATE_TAKES_ev-2", "HOOKGATE_RECORDS_ev-2", "hookgate.records_ev-2"}},
		{"é+#", cluster.Names{"HOOKGATE_CLAIMS_32a0f6f3def748b8", "HOOKGATE_DELIVERIES_32a0f6f3def748b8",
			"HOOKGATE_ROUTES_32a0f6f3def748b8", "HOOKGATE_STATS_32a0f6f3def748b8", "HOOKGATE_TAKES_32a0f6f3def748b8", "HOOKGATE_RECORDS_32a0f6f3def748b8",
			"hookgate.records_32a0f6f3def748b8"}},
	} {
		if got := cluster.Deployment(c.stream); got != c.want {
			t.Errorf("Deployment(%q) = %+v, want %+v", c.stream, got, c.want)
		}
	}
}

// Reads of the stats bucket share one consumer (no consumer made and
// deleted at each, a proposal to the meta layer in a NATS cluster), made
// again if it is gone.
func TestStatsReadsShareAConsumer(t *testing.T) {
	js := connectJS(t, gatewaytest.RunNATS(t, 0, t.TempDir()).ClientURL())
	ctx := context.Background()
	b, err := cluster.NewStatsBucket(cluster.StatsConfig{Gateway: "gw-a", Wait: 5 * time.Second,
		JetStream: func() natsjs.JetStream { return js }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	consumers := func() []string {
		t.Helper()
		s, err := js.Stream(ctx, "KV_"+cluster.DefaultStatsBucket)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for n := range s.ConsumerNames(ctx).Name() {
			names = append(names, n)
		}
		return names
	}
	read := func(want int) {
		t.Helper()
		entries, _, _, err := b.Read(ctx)
		if err != nil || len(entries) != want {
			t.Fatalf("read %d entries (%v), want %d", len(entries), err, want)
		}
	}
	base := time.UnixMilli(1_700_000_000_000)
	for i := range 3 {
		if err := b.Put(ctx, base.Add(time.Duration(i)*time.Minute), []byte(`{"c":[]}`)); err != nil {
			t.Fatal(err)
		}
	}
	read(3)
	first := consumers()
	if len(first) != 1 {
		t.Fatalf("consumers after a read: %v, want one", first)
	}
	for i := 3; i < 6; i++ {
		if err := b.Put(ctx, base.Add(time.Duration(i)*time.Minute), []byte(`{"c":[]}`)); err != nil {
			t.Fatal(err)
		}
		read(1)
	}
	if got := consumers(); len(got) != 1 || got[0] != first[0] {
		t.Errorf("consumers after more reads: %v, want %v", got, first)
	}

	// The consumer deleted (its inactivity threshold passed): made again
	// from where the reads were.
	if err := js.DeleteConsumer(ctx, "KV_"+cluster.DefaultStatsBucket, first[0]); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, base.Add(6*time.Minute), []byte(`{"c":[]}`)); err != nil {
		t.Fatal(err)
	}
	read(1)
	read(0)
}

// A read returns at most ReadBytes of values and the batch it was in,
// and says there is more: a day of every gateway's samples is not held
// at once. The reads after it return the rest.
func TestStatsReadBounded(t *testing.T) {
	js := connectJS(t, gatewaytest.RunNATS(t, 0, t.TempDir()).ClientURL())
	ctx := context.Background()
	const readBytes, size, n = 64 << 10, 20 << 10, 200
	b, err := cluster.NewStatsBucket(cluster.StatsConfig{Gateway: "gw-a", Wait: 5 * time.Second, ReadBytes: readBytes,
		JetStream: func() natsjs.JetStream { return js }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	value := make([]byte, size)
	base := time.UnixMilli(1_700_000_000_000)
	for i := range n {
		if err := b.Put(ctx, base.Add(time.Duration(i)*time.Minute), value); err != nil {
			t.Fatal(err)
		}
	}
	got, reads := 0, 0
	for more := true; more; reads++ {
		var entries []cluster.StatsEntry
		entries, _, more, err = b.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// ReadBytes, then one batch of 64 at most.
		if len(entries)*size > readBytes+64*size {
			t.Fatalf("read %d: %d entries, %d bytes of values; want at most %d", reads, len(entries), len(entries)*size, readBytes+64*size)
		}
		got += len(entries)
		if reads > n {
			t.Fatalf("%d reads and more", reads)
		}
	}
	if got != n || reads < 2 {
		t.Errorf("%d entries in %d reads, want %d in several", got, reads, n)
	}
}

// A gateway's first read of the console's samples on a NATS cluster
// makes the reads' consumer (one replica) on whichever node the cluster
// places it; until that node's interest reaches the node this gateway is
// connected to, a fetch has no responders. The first read waits for it:
// no gateway's start warns that it cannot read the samples.
func TestStatsFirstReadOnNATSCluster(t *testing.T) {
	nc := gatewaytest.RunNATSCluster(t, 3)
	ctx := context.Background()
	base := time.UnixMilli(1_700_000_000_000)
	for i := range 20 {
		js := connectJS(t, nc.URL)
		b, err := cluster.NewStatsBucket(cluster.StatsConfig{Gateway: fmt.Sprintf("gw-%d", i), Wait: 10 * time.Second,
			Replicas: 3, JetStream: func() natsjs.JetStream { return js }}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Put(ctx, base.Add(time.Duration(i)*time.Minute), []byte(`{"c":[]}`)); err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := b.Read(ctx); err != nil {
			t.Fatalf("gateway %d: first read: %v", i, err)
		}
	}
}
