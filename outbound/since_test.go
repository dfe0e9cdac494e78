package outbound_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/store"
)

// A route added later is not waited for on the events received before
// it, which it is never given: retention prunes them once the routes of
// their time finished. (They were kept for good: the store only grew.)
// A route there from the first start is waited for.
func TestRetentionAfterRouteAdded(t *testing.T) {
	a, b := newDownstream(t, nil), newDownstream(t, nil)
	dir := t.TempDir()
	cfg := func(routes string) *config.Config {
		return dirConfig(t, dir, "retention: {events: 1s, interval: 100ms}\n", routes)
	}
	g := restart(t, cfg(routeYAML("a", a.URL, "")))
	g.send(t, "evt_old", "invoice.paid")
	g.waitState(t, "a", "stripe", "evt_old", store.StateSucceeded)
	waitPublished(t, g, "evt_old")
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	g = restart(t, cfg(routeYAML("a", a.URL, "")+routeYAML("b", b.URL, "")))
	g.send(t, "evt_new", "invoice.paid")
	g.waitState(t, "b", "stripe", "evt_new", store.StateSucceeded)
	g.send(t, "evt_newest", "invoice.paid") // retention keeps the newest event
	g.waitState(t, "b", "stripe", "evt_newest", store.StateSucceeded)
	for _, id := range []string{"evt_old", "evt_new"} {
		waitFor(t, id+" pruned", func() (bool, string) {
			_, err := g.Store().GetEvent(context.Background(), "stripe", id)
			return errors.Is(err, store.ErrNotFound), fmt.Sprint(err)
		})
	}
	if n := len(b.succeeded()["/ evt_old"]); n != 0 {
		t.Errorf("b's downstream got evt_old %d times, want 0 (b came after)", n)
	}
}

// On a stream made anew, a route added later is not owed the events
// received before it that it has no delivery of: they are not published
// again for it, and its downstream never sees them. An event it does have
// an open delivery of (it was still in the stream when the route came) is
// still owed, even once the other routes finished it, and delivered once.
func TestStreamWipedSparesRouteAddedLater(t *testing.T) {
	var aUp, bUp atomic.Bool
	failUntil := func(up *atomic.Bool) func(w http.ResponseWriter, r *http.Request, n int) int {
		return func(w http.ResponseWriter, r *http.Request, n int) int {
			if !up.Load() && r.Header.Get("X-Hookgate-Event-Id") == "evt_held" {
				w.WriteHeader(503)
				return 503
			}
			w.WriteHeader(200)
			return 200
		}
	}
	a, b := newDownstream(t, failUntil(&aUp)), newDownstream(t, failUntil(&bUp))
	dir := t.TempDir()
	cfg := func(routes string) *config.Config { return dirConfig(t, dir, "", routes) }
	const retry = ", retries: 0, schedule: [1s, 1s, 1s]"
	g := restart(t, cfg(routeYAML("a", a.URL, retry)))
	old := []string{"evt_old1", "evt_old2"}
	for _, id := range old {
		g.send(t, id, "invoice.paid")
		g.waitState(t, "a", "stripe", id, store.StateSucceeded)
	}
	g.send(t, "evt_held", "invoice.paid") // a keeps it in the stream
	g.waitState(t, "a", "stripe", "evt_held", store.StateRetrying)
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	// b comes: the stream gives it evt_held, not the old events.
	g = restart(t, cfg(routeYAML("a", a.URL, retry)+routeYAML("b", b.URL, retry)))
	g.waitState(t, "b", "stripe", "evt_held", store.StateRetrying)
	aUp.Store(true)
	g.waitState(t, "a", "stripe", "evt_held", store.StateSucceeded)
	published := map[string]time.Time{}
	for _, id := range old {
		ev, err := g.Store().GetEvent(context.Background(), "stripe", id)
		if err != nil {
			t.Fatal(err)
		}
		published[id] = ev.PublishedAt
	}
	g = restartWiped(t, g, &bUp)
	g.waitState(t, "b", "stripe", "evt_held", store.StateSucceeded)
	// Recovery runs before the relay publishes: once evt_new is
	// delivered, whatever it published again was published before.
	g.send(t, "evt_new", "invoice.paid")
	g.waitState(t, "b", "stripe", "evt_new", store.StateSucceeded)
	for _, id := range old {
		ev, err := g.Store().GetEvent(context.Background(), "stripe", id)
		if err != nil {
			t.Fatal(err)
		}
		if !ev.PublishedAt.Equal(published[id]) {
			t.Errorf("%s, which a finished and b was added after, was published again", id)
		}
		if d := g.delivery(t, "b", "stripe", id); d != nil {
			t.Errorf("route b, added after %s, has a delivery of it: %+v", id, *d)
		}
		if n := len(b.succeeded()["/ "+id]); n != 0 {
			t.Errorf("b's downstream got %s %d times, want 0", id, n)
		}
	}
	// What the stream still held when b came is b's, once.
	if n := len(b.succeeded()["/ evt_held"]); n != 1 {
		t.Errorf("b's downstream got evt_held %d times, want once", n)
	}
}

// waitConsumerDone waits until the consumer has nothing pending or
// unacknowledged.
func waitConsumerDone(t *testing.T, g *gateway, name string) {
	t.Helper()
	waitFor(t, name+" done", func() (bool, string) {
		c, err := g.Broker().JetStream().Consumer(context.Background(), g.Broker().Stream(), name)
		if err != nil {
			return false, err.Error()
		}
		ci, err := c.Info(context.Background())
		if err != nil {
			return false, err.Error()
		}
		return ci.NumAckPending == 0 && ci.NumPending == 0, fmt.Sprintf("ack pending %d, pending %d", ci.NumAckPending, ci.NumPending)
	})
}

// dirConfig is a gateway's config on data_dir dir, the Stripe source, the
// top-level keys extra and routes: the same store whatever the routes.
func dirConfig(t *testing.T, dir, extra, routes string) *config.Config {
	t.Helper()
	c, err := config.Parse(fmt.Appendf(nil, `
listen: "127.0.0.1:0"
data_dir: %q
%ssources:
  - {name: stripe, verify: stripe, secrets: [%q]}
routes:
%s`, dir, extra, stripeSecret, routes), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return c
}

// A route whose events widen is not waited for on the events of the new
// types received before, which it was never given: retention prunes them
// once the routes of their time finished. (They were kept for good.) An
// event of the new types received after the change is waited for.
func TestRetentionAfterRouteWidened(t *testing.T) {
	a, b := newDownstream(t, nil), newDownstream(t, nil)
	dir := t.TempDir()
	cfg := func(aEvents string) *config.Config {
		return dirConfig(t, dir, "retention: {events: 1s, interval: 100ms}\n",
			routeYAML("a", a.URL, ", events: ["+aEvents+"]")+routeYAML("b", b.URL, ""))
	}
	g := restart(t, cfg(`"invoice.*"`))
	g.send(t, "evt_old", "customer.created") // b's only
	g.waitState(t, "b", "stripe", "evt_old", store.StateSucceeded)
	waitPublished(t, g, "evt_old")    // else the next start publishes it, for a too
	waitConsumerDone(t, g, "route_a") // a acked evt_old, not its type yet
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	g = restart(t, cfg(`"invoice.*", "customer.*"`))
	g.send(t, "evt_new", "customer.created")
	g.waitState(t, "a", "stripe", "evt_new", store.StateSucceeded)
	g.waitState(t, "b", "stripe", "evt_new", store.StateSucceeded)
	g.send(t, "evt_newest", "invoice.paid") // retention keeps the newest event
	g.waitState(t, "a", "stripe", "evt_newest", store.StateSucceeded)
	g.waitState(t, "b", "stripe", "evt_newest", store.StateSucceeded)
	for _, id := range []string{"evt_old", "evt_new"} {
		waitFor(t, id+" pruned", func() (bool, string) {
			_, err := g.Store().GetEvent(context.Background(), "stripe", id)
			return errors.Is(err, store.ErrNotFound), fmt.Sprint(err)
		})
	}
	if n := len(a.succeeded()["/ evt_old"]); n != 0 {
		t.Errorf("a's downstream got evt_old %d times, want 0 (its type came after)", n)
	}
}

// On a stream made anew, a route whose events widened is not owed the
// events of the new types received before: they are not published again,
// and its downstream never sees them.
func TestStreamWipedSparesRouteWidened(t *testing.T) {
	a, b := newDownstream(t, nil), newDownstream(t, nil)
	dir := t.TempDir()
	cfg := func(aEvents string) *config.Config {
		return dirConfig(t, dir, "", routeYAML("a", a.URL, ", events: ["+aEvents+"]")+routeYAML("b", b.URL, ""))
	}
	g := restart(t, cfg(`"invoice.*"`))
	g.send(t, "evt_old", "customer.created") // b's only
	g.waitState(t, "b", "stripe", "evt_old", store.StateSucceeded)
	waitPublished(t, g, "evt_old") // else the next start publishes it, for a too
	old, err := g.Store().GetEvent(context.Background(), "stripe", "evt_old")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	widened := cfg(`"invoice.*", "customer.*"`)
	if err := os.RemoveAll(widened.NATS.StoreDir); err != nil {
		t.Fatal(err)
	}
	g = restart(t, widened)
	// Recovery runs before the relay publishes: once evt_new is
	// delivered, whatever it published again was published before.
	g.send(t, "evt_new", "customer.created")
	g.waitState(t, "a", "stripe", "evt_new", store.StateSucceeded)
	ev, err := g.Store().GetEvent(context.Background(), "stripe", "evt_old")
	if err != nil {
		t.Fatal(err)
	}
	if !ev.PublishedAt.Equal(old.PublishedAt) {
		t.Errorf("evt_old, which b finished before a took its type, was published again")
	}
	if d := g.delivery(t, "a", "stripe", "evt_old"); d != nil {
		t.Errorf("route a, widened after evt_old, has a delivery of it: %+v", *d)
	}
}

// waitPublished waits until the relay recorded the Stripe event id as
// published.
func waitPublished(t *testing.T, g *gateway, id string) {
	t.Helper()
	waitFor(t, id+" published", func() (bool, string) {
		ev, err := g.Store().GetEvent(context.Background(), "stripe", id)
		if err != nil {
			return false, err.Error()
		}
		return !ev.PublishedAt.IsZero(), "not yet"
	})
}

// A route's since is never later than its consumer's creation: in a
// cluster each gateway records its own since when it restarts with a new
// route, after the first made the route's shared consumer, and an event
// received in between must still be the route's on every gateway. Here
// the store's since is an hour ahead of the consumer this start makes.
func TestRouteSinceAgreesWithConsumer(t *testing.T) {
	ds := newDownstream(t, nil)
	dir := t.TempDir()
	cfg := dirConfig(t, dir, "", routeYAML("b", ds.URL, ""))
	st, err := store.Open(context.Background(), store.Config{Path: cfg.Store.Path}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	later := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	for k, v := range map[string]string{"routes_since_kept": "1", "route_since:b": later} {
		if err := st.SetMeta(context.Background(), k, v); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	g := restart(t, cfg)
	g.send(t, "evt_1", "invoice.paid")
	g.waitState(t, "b", "stripe", "evt_1", store.StateSucceeded)
	v, err := g.Store().Meta(context.Background(), "route_since:b")
	if err != nil || v == later {
		t.Errorf("route_since:b = %q, %v; want the consumer's creation, recorded", v, err)
	}
}

// Recovery owes a route the events received after its consumer was made,
// even on the start that records the route's since (later: in a cluster,
// another gateway made the consumer before this one had the route). Here
// the store's since is an hour ahead of the consumer, and the stream lost
// the tail that held evt_lost. (Recovery read the store's since before the
// puller lowered it, and owed the route nothing.)
func TestOwedAgreesSinceWithConsumer(t *testing.T) {
	ds := newDownstream(t, nil)
	cfg := dirConfig(t, t.TempDir(), "", routeYAML("b", ds.URL, ""))
	g := restart(t, cfg) // makes route b's consumer
	g.send(t, "evt_first", "invoice.paid")
	g.waitState(t, "b", "stripe", "evt_first", store.StateSucceeded)
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	withStore(t, cfg.Store.Path, func(st *store.Store) {
		ctx := context.Background()
		later := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
		if err := st.SetMeta(ctx, "route_since:b", later); err != nil {
			t.Fatal(err)
		}
		ev := &store.Event{Source: "stripe", ID: "evt_lost", Type: "invoice.paid", ContentType: "application/json",
			Body: []byte(`{"id":"evt_lost"}`), ReceivedAt: time.Now()}
		if dup, err := st.Claim(ctx, ev); err != nil || dup {
			t.Fatalf("claim: dup=%v err=%v", dup, err)
		}
		// Past the stream's last sequence: a tail the stream lost.
		if err := st.MarkPublished(ctx, []store.Published{{Seq: ev.Seq, StreamSeq: 1000}}, time.Now()); err != nil {
			t.Fatal(err)
		}
	})
	g = restart(t, cfg)
	g.waitState(t, "b", "stripe", "evt_lost", store.StateSucceeded)
}

// A route removed and configured again is not waited for on the events
// received while it was gone, which it was never given (its consumer was
// deleted with it): retention prunes them once the routes of their time
// finished. (They were kept for good: the route was taken as configured
// throughout.)
func TestRetentionAfterRouteRemovedAndAddedAgain(t *testing.T) {
	a, b := newDownstream(t, nil), newDownstream(t, nil)
	dir := t.TempDir()
	cfg := func(routes string) *config.Config {
		return dirConfig(t, dir, "retention: {events: 1s, interval: 100ms}\n", routes)
	}
	both := routeYAML("a", a.URL, "") + routeYAML("b", b.URL, "")
	g := restart(t, cfg(both))
	g.send(t, "evt_first", "invoice.paid")
	g.waitState(t, "b", "stripe", "evt_first", store.StateSucceeded)
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	g = restart(t, cfg(routeYAML("a", a.URL, ""))) // b removed: its consumer deleted
	g.send(t, "evt_gone", "invoice.paid")
	g.waitState(t, "a", "stripe", "evt_gone", store.StateSucceeded)
	waitPublished(t, g, "evt_gone")
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	g = restart(t, cfg(both))
	g.send(t, "evt_back", "invoice.paid")
	g.waitState(t, "b", "stripe", "evt_back", store.StateSucceeded)
	g.send(t, "evt_newest", "invoice.paid") // retention keeps the newest event
	g.waitState(t, "b", "stripe", "evt_newest", store.StateSucceeded)
	g.waitState(t, "a", "stripe", "evt_newest", store.StateSucceeded)
	for _, id := range []string{"evt_first", "evt_gone", "evt_back"} {
		waitFor(t, id+" pruned", func() (bool, string) {
			_, err := g.Store().GetEvent(context.Background(), "stripe", id)
			return errors.Is(err, store.ErrNotFound), fmt.Sprint(err)
		})
	}
	if n := len(b.succeeded()["/ evt_gone"]); n != 0 {
		t.Errorf("b's downstream got evt_gone %d times, want 0 (b was removed then)", n)
	}
}

// A copy published anew of an event a route took is the route's even when
// the route was narrowed within the receipt time's margin after it (and
// widened again since): the margin counts a receipt as possibly later,
// never as not taken when it was. (It was acked without a delivery, and
// retention waited for the route for good.) Here b's replay of the event
// was cut short by a crash, so the start publishes it anew; route a had
// not pulled it, and took invoice events until 30 s after its receipt.
func TestCopyAnewTakenByRouteNarrowedAfterReceipt(t *testing.T) {
	ds := newDownstream(t, nil)
	at := time.Now().Add(-10 * time.Minute)
	ms := func(d time.Duration) int64 { return at.Add(d).UnixMilli() }
	takesA := fmt.Sprintf(`[{"since":0,"sources":["stripe"],"events":["invoice.*"]},`+
		`{"since":%d,"sources":["stripe"],"events":["customer.*"]},`+
		`{"since":%d,"sources":["stripe"],"events":["customer.*","invoice.*"]}]`, ms(30*time.Second), ms(5*time.Minute))
	g := beforeStart(t, baseConfig(t, routeYAML("a", ds.URL+"/a", `, events: ["invoice.*", "customer.*"]`)+
		routeYAML("b", ds.URL+"/b", "")), func(st *store.Store) {
		ctx := context.Background()
		for k, v := range map[string]string{"routes_since_kept": "1", "route_since:a": "0", "route_since:b": "0",
			"routes_configured": `["a","b"]`, "route_takes:a": takesA} {
			if err := st.SetMeta(ctx, k, v); err != nil {
				t.Fatal(err)
			}
		}
		ev := &store.Event{Source: "stripe", ID: "evt_1", Type: "invoice.paid", ContentType: "application/json",
			Body: []byte(`{"id":"evt_1"}`), ReceivedAt: at}
		if dup, err := st.Claim(ctx, ev); err != nil || dup {
			t.Fatalf("claim: dup=%v err=%v", dup, err)
		}
		if err := st.MarkPublished(ctx, []store.Published{{Seq: ev.Seq, StreamSeq: 1}}, at); err != nil {
			t.Fatal(err)
		}
		if _, err := st.ResetDelivery(ctx, &store.Delivery{EventSeq: ev.Seq, Route: "b", Source: "stripe", EventID: "evt_1",
			EventType: "invoice.paid", IdempotencyKey: outbound.IdempotencyKey("b", "stripe", "evt_1")}, nil); err != nil {
			t.Fatal(err)
		}
	})
	g.waitState(t, "b", "stripe", "evt_1", store.StateSucceeded)
	g.waitState(t, "a", "stripe", "evt_1", store.StateSucceeded)
}
