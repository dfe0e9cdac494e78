package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/app"
	"github.com/hookgate/hookgate/cluster"
	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/store"
)

// replicaGateway runs a gateway in cluster mode with data_dir dir and a
// route r to url whose requests carry X-Gw: name, on a long schedule
// (rounds 50ms apart) so that a failing gateway leaves the delivery to
// another.
func replicaGateway(t *testing.T, name, urls, url, dir string) *app.App {
	t.Helper()
	return replicaGatewayWith(t, name, urls, url, dir, "", "", "["+strings.Repeat("50ms, ", 19)+"50ms]")
}

// replicaGatewayWith is replicaGateway with more of the cluster's
// options, more YAML and the route's schedule.
func replicaGatewayWith(t *testing.T, name, urls, url, dir, clusterOpts, extra, schedule string) *app.App {
	t.Helper()
	yaml := fmt.Sprintf(`
listen: "127.0.0.1:0"
data_dir: %q
nats: {url: %q, replicas: 3}
cluster: {enabled: true%s}
api: {tokens: [%q]}
sources:
  - {name: s, verify: none, id_field: id, type_field: type}
routes:
  - {name: r, sources: [s], url: %q, headers: {X-Gw: %s}, retries: 0, timeout: 30s, breaker_threshold: 0,
     schedule: %s}
tasks: {tokens: [%q, %q], allow: [127.0.0.1], retries: 0, schedule: [50ms]}
%s`, dir, urls, clusterOpts, apiToken, url, name, schedule, taskTokenA, taskTokenB, extra)
	return runGateway(t, name, yaml)
}

// Task-client tokens of the replica gateways.
const (
	taskTokenA = "task-client-a-0123456789"
	taskTokenB = "task-client-b-0123456789"
)

// sentReq is one request the operator-view downstream saw.
type sentReq struct {
	gw, key, attempt string
	body             string
	status           int
}

// viewDownstream fails every request of gateway gw1 for an "ok-" event
// with 500 (so another gateway delivers what gw1 accepts), answers 410 to
// "dead-" events until revived, 500 to "owed-" events, and 200 otherwise.
type viewDownstream struct {
	*httptest.Server
	mu      sync.Mutex
	reqs    map[string][]sentReq // by event ID
	revived map[string]bool
}

func newViewDownstream(t *testing.T) *viewDownstream {
	d := &viewDownstream{reqs: map[string][]sentReq{}, revived: map[string]bool{}}
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id, gw := r.Header.Get("X-Hookgate-Event-Id"), r.Header.Get("X-Gw")
		d.mu.Lock()
		status := http.StatusOK
		switch {
		case strings.HasPrefix(id, "dead-") && !d.revived[id]:
			status = http.StatusGone
		case gw == "gw1" && strings.HasPrefix(id, "ok-"), strings.HasPrefix(id, "owed-"):
			status = http.StatusInternalServerError
		}
		d.reqs[id] = append(d.reqs[id], sentReq{gw: gw, key: r.Header.Get("Idempotency-Key"),
			attempt: r.Header.Get("X-Hookgate-Attempt"), body: string(body), status: status})
		d.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(d.Close)
	return d
}

func (d *viewDownstream) of(id string) []sentReq {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]sentReq(nil), d.reqs[id]...)
}

// post sends event id to gateway a.
func post(t *testing.T, a *app.App, id string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+a.Addr()+"/webhooks/s",
		strings.NewReader(fmt.Sprintf(`{"id":%q,"type":"t"}`, id)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sender/"+id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"accepted"`)) {
		t.Fatalf("post %s: %d %s", id, resp.StatusCode, body)
	}
}

// apiGet reads a /v1 path of gateway a into out; it returns the status.
func apiGet(t *testing.T, a *app.App, path string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+a.Addr()+path, nil)
	req.Header.Set("Authorization", "Bearer "+apiToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		dec := json.NewDecoder(resp.Body)
		dec.UseNumber()
		if err := dec.Decode(out); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode
}

// apiPost posts to a /v1 path of gateway a with no body; it returns the
// status and the answer.
func apiPost(t *testing.T, a *app.App, path string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+a.Addr()+path, nil)
	req.Header.Set("Authorization", "Bearer "+apiToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, body
}

type eventView struct {
	Headers    json.RawMessage  `json:"headers"`
	ReceivedAt string           `json:"received_at"`
	Body       string           `json:"body"`
	Deliveries []map[string]any `json:"deliveries"`
}

// eventOn is /v1/events/s/{id} on a, with the state and attempts of its
// delivery to route r ("" and 0 if none).
func eventOn(t *testing.T, a *app.App, id string) (ev eventView, state string, attempts int, found bool) {
	t.Helper()
	if apiGet(t, a, "/v1/events/s/"+id, &ev) != http.StatusOK {
		return ev, "", 0, false
	}
	for _, d := range ev.Deliveries {
		if d["route"] == "r" {
			n, _ := d["attempts"].(json.Number).Int64()
			return ev, fmt.Sprint(d["state"]), int(n), true
		}
	}
	return ev, "", 0, true
}

// deadOn lists the event IDs of the dead letters gateway a shows, with
// each one's delivery ID there.
func deadOn(t *testing.T, a *app.App) map[string]string {
	t.Helper()
	var page struct {
		Data []map[string]any `json:"data"`
	}
	if apiGet(t, a, "/v1/deliveries?state=dead&limit=100", &page) != http.StatusOK {
		return nil
	}
	out := map[string]string{}
	for _, d := range page.Data {
		out[fmt.Sprint(d["event_id"])] = fmt.Sprint(d["id"])
	}
	return out
}

// Three gateways, one operator view: an event accepted on gw1 and
// delivered by another gateway is shown by every gateway with its
// delivery, attempts, original headers and receipt time; every
// gateway lists every gateway's dead letters; a retry asked on a gateway
// that did not run the dead delivery sends the same event again (same
// Idempotency-Key, same body) and every gateway then shows it succeeded;
// a gateway stopped meanwhile catches up when it starts again, and an
// event accepted while NATS is down reaches every gateway once it is
// back.
func TestOneOperatorView(t *testing.T) {
	nc := gatewaytest.RunNATSCluster(t, 3)
	ds := newViewDownstream(t)
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	gws := make([]*app.App, 3)
	for i := range gws {
		gws[i] = replicaGateway(t, fmt.Sprintf("gw%d", i+1), nc.URL, ds.URL, dirs[i])
	}

	// Accepted on gw1, delivered elsewhere (gw1's requests fail).
	post(t, gws[0], "ok-1")
	orig, _, _, _ := eventOn(t, gws[0], "ok-1")
	for i, g := range gws {
		gatewaytest.WaitFor(t, fmt.Sprintf("gw%d shows ok-1 delivered", i+1), 60*time.Second, func() (bool, string) {
			ev, state, attempts, found := eventOn(t, g, "ok-1")
			sent := ds.of("ok-1")
			ok := found && state == store.StateSucceeded && attempts == len(sent) &&
				string(ev.Headers) == string(orig.Headers) && ev.ReceivedAt == orig.ReceivedAt && ev.Body == orig.Body
			return ok, fmt.Sprintf("found %v, state %q, %d attempts (%d sent), headers %s, received_at %s",
				found, state, attempts, len(sent), ev.Headers, ev.ReceivedAt)
		})
	}
	if !strings.Contains(string(orig.Headers), "sender/ok-1") {
		t.Fatalf("gw1 kept headers %s", orig.Headers)
	}
	sent := ds.of("ok-1")
	if last := sent[len(sent)-1]; last.gw == "gw1" || last.status != http.StatusOK {
		t.Fatalf("ok-1 requests %+v: want the success from another gateway", sent)
	}
	// Every gateway has every attempt, numbered as the downstream saw them.
	for i, g := range gws {
		d, err := g.Store().Delivery(context.Background(), "r", "s", "ok-1")
		if err != nil {
			t.Fatal(err)
		}
		at, err := g.Store().Attempts(context.Background(), d.ID)
		if err != nil || len(at) != len(sent) {
			t.Fatalf("gw%d: %d attempts (%v), the downstream saw %d", i+1, len(at), err, len(sent))
		}
		for j, a := range at {
			if fmt.Sprint(a.Attempt) != sent[j].attempt || a.Status != sent[j].status {
				t.Fatalf("gw%d attempt %d: %+v, the downstream saw %+v", i+1, j, a, sent[j])
			}
		}
	}

	// Dead letters from every gateway's intake, on every gateway.
	for i, g := range gws {
		post(t, g, fmt.Sprintf("dead-%d", i+1))
	}
	for i, g := range gws {
		gatewaytest.WaitFor(t, fmt.Sprintf("gw%d lists every dead letter", i+1), 60*time.Second, func() (bool, string) {
			dead := deadOn(t, g)
			return len(dead) == 3, fmt.Sprintf("%v", dead)
		})
	}

	// A replay asked on gw3 sends ok-1 again (same key, same body), and
	// every gateway shows the extra attempt.
	sent = ds.of("ok-1")
	rreq, _ := http.NewRequest(http.MethodPost, "http://"+gws[2].Addr()+"/v1/events/s/ok-1/replay", nil)
	rreq.Header.Set("Authorization", "Bearer "+apiToken)
	rresp, err := http.DefaultClient.Do(rreq)
	if err != nil {
		t.Fatal(err)
	}
	_ = rresp.Body.Close()
	if rresp.StatusCode != http.StatusAccepted {
		t.Fatalf("replay on gw3: %d", rresp.StatusCode)
	}
	for i, g := range gws {
		gatewaytest.WaitFor(t, fmt.Sprintf("gw%d shows the replay", i+1), 60*time.Second, func() (bool, string) {
			_, state, attempts, _ := eventOn(t, g, "ok-1")
			return state == store.StateSucceeded && attempts == len(sent)+1, fmt.Sprintf("%s, %d attempts", state, attempts)
		})
	}
	if re := ds.of("ok-1"); len(re) != len(sent)+1 || re[len(sent)].gw != "gw3" || re[len(sent)].key != sent[0].key ||
		re[len(sent)].body != sent[0].body {
		t.Fatalf("ok-1 requests after the replay %+v: want one more from gw3 with the same key and body", re)
	}

	// A task submitted on gw1 is its client's on every gateway, and only
	// its client's.
	treq, _ := http.NewRequest(http.MethodPost, "http://"+gws[0].Addr()+"/v1/tasks",
		strings.NewReader(fmt.Sprintf(`{"url":%q}`, ds.URL+"/task")))
	treq.Header.Set("Authorization", "Bearer "+taskTokenA)
	treq.Header.Set("Idempotency-Key", "task-1")
	treq.Header.Set("Content-Type", "application/json")
	tresp, err := http.DefaultClient.Do(treq)
	if err != nil {
		t.Fatal(err)
	}
	var task map[string]any
	_ = json.NewDecoder(tresp.Body).Decode(&task)
	_ = tresp.Body.Close()
	if tresp.StatusCode != http.StatusAccepted {
		t.Fatalf("task: %d %v", tresp.StatusCode, task)
	}
	taskPath := fmt.Sprintf("/v1/tasks/%v", task["id"])
	taskOn := func(g *app.App, tok string) (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+g.Addr()+taskPath, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body
	}
	for i, g := range gws {
		gatewaytest.WaitFor(t, fmt.Sprintf("gw%d shows the task succeeded to its client", i+1), 60*time.Second, func() (bool, string) {
			code, body := taskOn(g, taskTokenA)
			return code == http.StatusOK && body["state"] == store.StateSucceeded, fmt.Sprint(code, body)
		})
		if code, _ := taskOn(g, taskTokenB); code != http.StatusNotFound {
			t.Fatalf("gw%d shows client A's task to client B: %d", i+1, code)
		}
	}

	// A retry on a gateway that did not run the dead delivery.
	first := ds.of("dead-1")
	if len(first) != 1 {
		t.Fatalf("dead-1 requests %+v, want 1", first)
	}
	var retryOn *app.App
	for i, g := range gws {
		if fmt.Sprintf("gw%d", i+1) != first[0].gw && fmt.Sprintf("gw%d", i+1) != "gw1" {
			retryOn = g
		}
	}
	ds.mu.Lock()
	ds.revived["dead-1"] = true
	ds.mu.Unlock()
	id := deadOn(t, retryOn)["dead-1"]
	req, _ := http.NewRequest(http.MethodPost, "http://"+retryOn.Addr()+"/v1/deliveries/"+id+"/retry", nil)
	req.Header.Set("Authorization", "Bearer "+apiToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("retry of %s on a gateway that did not run it: %d", id, resp.StatusCode)
	}
	for i, g := range gws {
		gatewaytest.WaitFor(t, fmt.Sprintf("gw%d shows the retry's success", i+1), 60*time.Second, func() (bool, string) {
			_, state, attempts, _ := eventOn(t, g, "dead-1")
			return state == store.StateSucceeded && attempts == 2, fmt.Sprintf("%s, %d attempts", state, attempts)
		})
	}
	again := ds.of("dead-1")
	if len(again) != 2 || again[1].key != again[0].key || again[1].body != again[0].body || again[1].status != http.StatusOK {
		t.Fatalf("dead-1 requests %+v: want the retry with the same Idempotency-Key and body", again)
	}

	// gw3 stopped while records flow, then started again.
	if err := gws[2].Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	post(t, gws[0], "ok-2")
	gatewaytest.WaitFor(t, "ok-2 delivered by gw2", 60*time.Second, func() (bool, string) {
		_, state, _, _ := eventOn(t, gws[1], "ok-2")
		return state == store.StateSucceeded, state
	})
	gws[2] = replicaGateway(t, "gw3", nc.URL, ds.URL, dirs[2])
	gatewaytest.WaitFor(t, "gw3 caught up", 60*time.Second, func() (bool, string) {
		ev, state, _, _ := eventOn(t, gws[2], "ok-2")
		return state == store.StateSucceeded && strings.Contains(string(ev.Headers), "sender/ok-2"), state
	})

	// Accepted while NATS is down: nothing lost once it is back. (Not an
	// "ok-" event: gw1, whose requests of those fail, may be the first
	// gateway back and run all its rounds.)
	for i := range 3 {
		nc.Stop(i)
	}
	post(t, gws[0], "late-3")
	for i := range 3 {
		nc.Start(t, i)
	}
	nc.WaitLeader(t)
	for i, g := range gws {
		gatewaytest.WaitFor(t, fmt.Sprintf("gw%d shows late-3 delivered", i+1), 90*time.Second, func() (bool, string) {
			ev, state, _, _ := eventOn(t, g, "late-3")
			return state == store.StateSucceeded && strings.Contains(string(ev.Headers), "sender/late-3"), state
		})
	}
}

// Round records written while NATS is down wait in the store and reach
// the other gateways once it is back.
func TestRoundRecordsOutlastOutage(t *testing.T) {
	nc := gatewaytest.RunNATSCluster(t, 3)
	ctx := context.Background()
	replica := func(name string) (*store.Store, *cluster.Records) {
		st := openStore(t)
		js := connectJS(t, nc.URL)
		r, err := cluster.NewRecords(st, cluster.RecordsConfig{Gateway: name, Replicas: 3, TTL: time.Hour,
			JetStream: func() natsjs.JetStream { return js }, Poll: 100 * time.Millisecond}, testLog())
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Stop(ctx) })
		return st, r
	}
	sta, ra := replica("a")
	stb, _ := replica("b")
	for i := range 3 {
		nc.Stop(i)
	}
	for i, id := range []string{"e1", "e2"} {
		ev := &store.Event{Source: "s", ID: id, Body: []byte("{}"), ReceivedAt: time.Now()}
		if _, err := sta.Claim(ctx, ev); err != nil {
			t.Fatal(err)
		}
		d := &store.Delivery{EventSeq: ev.Seq, Route: "r", Source: "s", EventID: id, IdempotencyKey: "k" + id,
			State: store.StateSucceeded, LastStatus: 200}
		if err := sta.RecordClusterRound(ctx, d, []store.Attempt{{StartedAt: time.Now(), Status: 200}},
			store.ClusterRound{Origin: "a", FirstAttempt: 1, Attempts: 1, Version: uint64(i + 1)}); err != nil {
			t.Fatal(err)
		}
		ra.Notify()
	}
	if n, _ := sta.CountRecordsOut(ctx); n != 2 {
		t.Fatalf("%d records waiting with NATS down, want 2", n)
	}
	for i := range 3 {
		nc.Start(t, i)
	}
	nc.WaitLeader(t)
	gatewaytest.WaitFor(t, "b applied both rounds", 60*time.Second, func() (bool, string) {
		got := 0
		for _, id := range []string{"e1", "e2"} {
			ds, _ := stb.ListDeliveries(ctx, store.DeliveryFilter{EventID: id})
			if len(ds) == 1 && ds[0].State == store.StateSucceeded {
				got++
			}
		}
		n, _ := sta.CountRecordsOut(ctx)
		return got == 2 && n == 0, fmt.Sprintf("%d applied, %d waiting", got, n)
	})
}

// Retention across gateways: an event accepted on gw1 and delivered by
// another gateway is pruned on every gateway after retention.events; an
// event a route still owes (retrying) is kept on every gateway.
func TestRetentionAcrossGateways(t *testing.T) {
	nc := gatewaytest.RunNATSCluster(t, 3)
	ds := newViewDownstream(t)
	extra := "retention: {events: 5s, interval: 200ms}\n"
	schedule := "[" + strings.Repeat("50ms, ", 30) + "1h]"
	gws := make([]*app.App, 3)
	for i := range gws {
		gws[i] = replicaGatewayWith(t, fmt.Sprintf("gw%d", i+1), nc.URL, ds.URL, t.TempDir(), ", records_ttl: 1h", extra, schedule)
	}
	// ok-r last: the newest event of every store until the pads below,
	// which retention never deletes.
	post(t, gws[0], "owed-r")
	post(t, gws[0], "ok-r")
	seen := map[int]bool{} // gateways seen showing ok-r delivered (before it is pruned)
	gatewaytest.WaitFor(t, "every gateway shows ok-r delivered and owed-r owed", 60*time.Second, func() (bool, string) {
		var state []string
		for i, g := range gws {
			_, okState, _, _ := eventOn(t, g, "ok-r")
			_, owedState, _, _ := eventOn(t, g, "owed-r")
			seen[i] = seen[i] || (okState == store.StateSucceeded && owedState == store.StateRetrying)
			state = append(state, okState+"/"+owedState)
		}
		return len(seen) == 3 && seen[0] && seen[1] && seen[2], fmt.Sprint(state)
	})
	// Newer events on every gateway: retention never deletes a store's newest.
	for i, g := range gws {
		post(t, g, fmt.Sprintf("pad-%d", i))
	}
	for i, g := range gws {
		gatewaytest.WaitFor(t, fmt.Sprintf("gw%d pruned ok-r", i+1), 60*time.Second, func() (bool, string) {
			var ev eventView
			code := apiGet(t, g, "/v1/events/s/ok-r", &ev)
			return code == http.StatusNotFound, fmt.Sprint(code)
		})
	}
	for i, g := range gws {
		if _, state, _, found := eventOn(t, g, "owed-r"); !found || state != store.StateRetrying {
			t.Fatalf("gw%d: the owed event: found %v, %q", i+1, found, state)
		}
	}
	logRecordsStream(t, nc.URL)
}

// logRecordsStream logs what the records stream holds (the README's
// disk cost per record).
func logRecordsStream(t *testing.T, urls string) {
	conn, err := nats.Connect(urls)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	js, _ := natsjs.New(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, cluster.DefaultRecordsStream)
	if err != nil {
		t.Fatal(err)
	}
	si := st.CachedInfo().State
	size := map[string]int{}
	for m := range si.Msgs {
		msg, err := st.GetMsg(ctx, m+1)
		if err != nil {
			continue
		}
		size[msg.Subject] += len(msg.Data) + len(msg.Header.Get(cluster.HeaderRecord))
		size[msg.Subject+" records"]++
	}
	t.Logf("records stream: %d records, %d bytes stored; data and JSON by kind: %v", si.Msgs, si.Bytes, size)
}

// A round whose outcome reached the delivery-state bucket only when its
// lease was released (NATS lost its quorum during the round) is then
// recorded with its record, for the other gateways.
func TestRoundRecordWrittenOnRelease(t *testing.T) {
	nc := gatewaytest.RunNATSCluster(t, 3)
	ctx := context.Background()
	st := openStore(t)
	js := connectJS(t, nc.URL)
	a := cluster.NewDeliveryState(func() natsjs.JetStream { return js }, st, cluster.DeliveryStateConfig{
		Replicas: 3, Wait: 5 * time.Second, Owner: "gw-a", Origin: "gw-a", Replica: st,
		Routes: []outbound.Route{{Name: "r", Timeout: time.Second}}}, testLog())
	k := adopt(t, st, "r", "s", "e1")
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !a.Claim(cctx, k) {
		t.Fatal("no claim within 30s")
	}
	nc.Stop(1) // no quorum: the outcome cannot be written
	nc.Stop(2)
	if err := a.Record(ctx, delivery(k, store.StateSucceeded), []store.Attempt{{StartedAt: time.Now(), Status: 200}}); err == nil {
		t.Fatal("an outcome written without a quorum")
	}
	if n, _ := st.CountRecordsOut(ctx); n != 0 {
		t.Fatalf("%d records of a round the cluster does not have", n)
	}
	nc.Start(t, 1)
	nc.Start(t, 2)
	nc.WaitLeader(t)
	gatewaytest.WaitFor(t, "a leader of the deliveries bucket", 30*time.Second, func() (bool, string) {
		for _, s := range nc.Servers {
			if s != nil && s.JetStreamIsStreamLeader("$G", "KV_HOOKGATE_DELIVERIES") {
				return true, ""
			}
		}
		return false, "none"
	})
	a.Release(k)
	out, err := st.RecordsOut(ctx, 10)
	if err != nil || len(out) != 1 {
		t.Fatalf("records out after the release: %d, %v; want the round's", len(out), err)
	}
	var rr store.RoundRecord
	if err := json.Unmarshal(out[0].Data, &rr); err != nil || rr.Version == 0 || rr.State != store.StateSucceeded || len(rr.AttemptList) != 1 {
		t.Fatalf("the round's record: %+v, %v", rr, err)
	}
}

// A gateway away longer than the records' TTL finds the records it had
// not applied gone: it counts them as missed and goes on from the first
// record held.
func TestRecordsMissedWhileAway(t *testing.T) {
	nc := gatewaytest.RunNATSCluster(t, 3)
	ctx := context.Background()
	conn, err := nats.Connect(nc.URL, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	js, _ := natsjs.New(conn)
	cfg := cluster.RecordsConfig{Replicas: 3, TTL: time.Hour, JetStream: func() natsjs.JetStream { return js },
		Poll: 50 * time.Millisecond}
	reg := prometheus.NewRegistry()
	sta, ra := startRecords(t, "a", cfg)
	cfg.Registerer = reg
	stb, rb := startRecords(t, "b", cfg)
	round := func(id string, version uint64) { t.Helper(); publishRound(t, sta, ra, id, version) }
	applied := func(st *store.Store, id string) bool {
		ds, _ := st.ListDeliveries(ctx, store.DeliveryFilter{EventID: id})
		return len(ds) == 1
	}
	round("e0", 1)
	gatewaytest.WaitFor(t, "b applied e0", 30*time.Second, func() (bool, string) { return applied(stb, "e0"), "" })
	_ = rb.Stop(ctx) // b is away
	round("e1", 2)
	round("e2", 3)
	// The records' age is cut short only while b is away, so that no
	// record b is to read can age out before b reads it.
	maxAge := func(age time.Duration) {
		t.Helper()
		st, err := js.Stream(ctx, cluster.DefaultRecordsStream)
		if err != nil {
			t.Fatal(err)
		}
		sc := st.CachedInfo().Config
		sc.MaxAge, sc.Duplicates = age, min(age, 2*time.Minute)
		if _, err := js.UpdateStream(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	maxAge(time.Second)
	gatewaytest.WaitFor(t, "the stream dropped e0, e1 and e2 (records_ttl)", 30*time.Second, func() (bool, string) {
		st, err := js.Stream(ctx, cluster.DefaultRecordsStream)
		if err != nil {
			return false, err.Error()
		}
		return st.CachedInfo().State.Msgs == 0, fmt.Sprint(st.CachedInfo().State.Msgs, " records")
	})
	maxAge(time.Hour)
	if err := rb.Start(ctx); err != nil { // b is back
		t.Fatal(err)
	}
	round("e3", 4)
	gatewaytest.WaitFor(t, "b applied e3", 30*time.Second, func() (bool, string) { return applied(stb, "e3"), "" })
	if applied(stb, "e1") || applied(stb, "e2") {
		t.Fatal("b applied records the stream no longer held")
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var missed float64
	for _, mf := range mfs {
		if mf.GetName() == "hookgate_cluster_records_missed_total" {
			missed = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if missed != 2 {
		t.Fatalf("missed %v records, want 2", missed)
	}
}

// An outcome in the delivery-state bucket that its round's gateway never
// recorded (stopped between the bucket's write and its commit) is recorded
// by the next gateway that claims the delivery, over what it had of the
// earlier rounds, with its record for the others; the message is not run
// again. A local row reset to pending (an operator's retry) is no orphan.
func TestOrphanedOutcomeRecorded(t *testing.T) {
	srv := gatewaytest.RunNATS(t, 0, t.TempDir())
	ctx := context.Background()
	conn, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	js, _ := natsjs.New(conn)
	open := func() *store.Store {
		st := openStore(t)
		return st
	}
	state := func(st *store.Store, name string) *cluster.DeliveryState {
		return cluster.NewDeliveryState(func() natsjs.JetStream { return js }, st, cluster.DeliveryStateConfig{
			Replicas: 1, Owner: name, Origin: name, Replica: st,
			Routes: []outbound.Route{{Name: "r", Timeout: time.Second}}}, testLog())
	}
	claim := func(ds *cluster.DeliveryState, k outbound.DeliveryKey) {
		t.Helper()
		gatewaytest.WaitFor(t, "a claim", 30*time.Second, func() (bool, string) { return ds.TryClaim(ctx, k), "refused" })
	}
	sta, stb := open(), open()
	a, b := state(sta, "gw-a"), state(stb, "gw-b")
	ka, kb := adopt(t, sta, "r", "s", "e1"), adopt(t, stb, "r", "s", "e1")

	// b's round fails; a's ends the delivery (410: dead) and a stops
	// before its commit.
	claim(b, kb)
	if err := b.Record(ctx, delivery(kb, store.StateRetrying), []store.Attempt{{StartedAt: time.Now(), Status: 503}}); err != nil {
		t.Fatal(err)
	}
	b.Release(kb)
	claim(a, ka)
	if err := sta.Close(); err != nil {
		t.Fatal(err)
	}
	gone := delivery(ka, store.StateDead)
	gone.LastStatus = 410
	if err := a.Record(ctx, gone, []store.Attempt{{StartedAt: time.Now(), Status: 410}}); err == nil {
		t.Fatal("a round recorded in a closed store")
	}

	claim(b, kb)
	st, err := b.Status(ctx, "r", kb.Seq, "s", "e1")
	if err != nil || st.State != store.StateDead || st.Attempts != 2 || st.ID == 0 {
		t.Fatalf("b's status: %+v, %v; want dead after 2 attempts, with b's ID", st, err)
	}
	b.Release(kb)
	d, err := stb.Delivery(ctx, "r", "s", "e1")
	if err != nil || d.State != store.StateDead || d.Attempts != 2 || d.EventType != "t" || d.LastStatus != 410 {
		t.Fatalf("b's record of the outcome: %+v, %v; want dead, 2 attempts, last status 410", d, err)
	}
	out, err := stb.RecordsOut(ctx, 10)
	if err != nil || len(out) != 2 {
		t.Fatalf("records out: %d, %v; want b's round's and the outcome's", len(out), err)
	}
	var rr store.RoundRecord
	if err := json.Unmarshal(out[1].Data, &rr); err != nil || rr.Version == 0 || rr.State != store.StateDead ||
		rr.Attempts != 2 || rr.LastStatus != 410 {
		t.Fatalf("the outcome's record: %+v, %v", rr, err)
	}

	// An operator's retry sets the row to pending before its round: the
	// cluster's outcome is no orphan then.
	if reset, err := stb.SetDeliveryState(ctx, d.ID, store.StatePending); err != nil || !reset {
		t.Fatalf("reset to pending: %v, %v", reset, err)
	}
	claim(b, kb)
	if _, err := b.Status(ctx, "r", kb.Seq, "s", "e1"); err != nil {
		t.Fatal(err)
	}
	b.Release(kb)
	if n, err := stb.CountRecordsOut(ctx); err != nil || n != 2 {
		t.Fatalf("records out after a reset to pending: %d, %v; want still 2", n, err)
	}
}

// A gateway away while the records stream is made anew (and gets as many
// records as it had applied, or more), or following it all along (the
// ordered consumer would go on in the new stream from its old cursor),
// reads the new stream from its start: it notes the stream's creation
// time with its position and looks at it while it follows.
func TestRecordsStreamMadeAnew(t *testing.T) {
	for _, away := range []bool{true, false} {
		t.Run(fmt.Sprintf("away %v", away), func(t *testing.T) { testRecordsStreamMadeAnew(t, away) })
	}
}

func testRecordsStreamMadeAnew(t *testing.T, away bool) {
	srv := gatewaytest.RunNATS(t, 0, t.TempDir())
	ctx := context.Background()
	conn, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	js, _ := natsjs.New(conn)
	cfg := cluster.RecordsConfig{Replicas: 1, TTL: time.Hour, JetStream: func() natsjs.JetStream { return js },
		Poll: 50 * time.Millisecond}
	sta, ra := startRecords(t, "a", cfg)
	stb, rb := startRecords(t, "b", cfg)
	round := func(id string, version uint64) { t.Helper(); publishRound(t, sta, ra, id, version) }
	applied := func(id string) bool {
		ds, _ := stb.ListDeliveries(ctx, store.DeliveryFilter{EventID: id})
		return len(ds) == 1
	}
	round("e0", 1)
	round("e0b", 2)
	gatewaytest.WaitFor(t, "b applied e0 and e0b", 30*time.Second, func() (bool, string) { return applied("e0b"), "" })
	if away {
		_ = rb.Stop(ctx)
	}
	if err := js.DeleteStream(ctx, cluster.DefaultRecordsStream); err != nil {
		t.Fatal(err)
	}
	ids := []string{"e1", "e2", "e3", "e4"}
	for i, id := range ids {
		round(id, uint64(3+i))
	}
	if away {
		if err := rb.Start(ctx); err != nil { // b is back
			t.Fatal(err)
		}
	}
	gatewaytest.WaitFor(t, "b applied the new stream's records", 30*time.Second, func() (bool, string) {
		var missing []string
		for _, id := range ids {
			if !applied(id) {
				missing = append(missing, id)
			}
		}
		return len(missing) == 0, fmt.Sprint("missing ", missing)
	})
}

// startRecords starts gateway name's records (cfg, its Gateway set) on a
// store of its own.
func startRecords(t *testing.T, name string, cfg cluster.RecordsConfig) (*store.Store, *cluster.Records) {
	t.Helper()
	st := openStore(t)
	cfg.Gateway = name
	r, err := cluster.NewRecords(st, cfg, testLog())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	return st, r
}

// publishRound stores event id on st with a succeeded round of version
// (gateway a's), and waits until r published the round's record.
func publishRound(t *testing.T, st *store.Store, r *cluster.Records, id string, version uint64) {
	t.Helper()
	ctx := context.Background()
	ev := &store.Event{Source: "s", ID: id, Body: []byte("{}"), ReceivedAt: time.Now()}
	if _, err := st.Claim(ctx, ev); err != nil {
		t.Fatal(err)
	}
	d := &store.Delivery{EventSeq: ev.Seq, Route: "r", Source: "s", EventID: id, IdempotencyKey: "k" + id,
		State: store.StateSucceeded, LastStatus: 200}
	if err := st.RecordClusterRound(ctx, d, []store.Attempt{{StartedAt: time.Now(), Status: 200}},
		store.ClusterRound{Origin: "a", FirstAttempt: 1, Attempts: 1, Version: version}); err != nil {
		t.Fatal(err)
	}
	r.Notify()
	gatewaytest.WaitFor(t, "a published "+id, 30*time.Second, func() (bool, string) {
		n, _ := st.CountRecordsOut(ctx)
		return n == 0, fmt.Sprint(n, " waiting")
	})
}
