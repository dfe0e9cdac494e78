package outbound_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hookgate/hookgate/config"
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
		t.Helper()
		c, err := config.Parse(fmt.Appendf(nil, `
listen: "127.0.0.1:0"
data_dir: %q
retention: {events: 1s, interval: 100ms}
sources:
  - {name: stripe, verify: stripe, secrets: [%q]}
routes:
%s`, dir, stripeSecret, routes), func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatalf("config: %v", err)
		}
		return c
	}
	g := restart(t, cfg(routeYAML("a", a.URL, "")))
	g.send(t, "evt_old", "invoice.paid")
	g.waitState(t, "a", "stripe", "evt_old", store.StateSucceeded)
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
	if d := g.delivery(t, "b", "stripe", "evt_old"); d != nil {
		t.Errorf("route b, added after evt_old, has a delivery of it: %+v", d)
	}
}
