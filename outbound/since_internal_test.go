package outbound

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/store"
)

func TestOwes(t *testing.T) {
	for _, c := range []struct {
		name                string
		has, terminal, took bool
		want                bool
	}{
		{"no delivery, taken at receipt", false, false, true, true},
		{"no delivery, not taken at receipt", false, false, false, false},
		{"open delivery, not taken at receipt", true, false, false, true},
		{"open delivery, taken at receipt", true, false, true, true},
		{"terminal delivery, taken at receipt", true, true, true, false},
		{"terminal delivery, not taken at receipt", true, true, false, false},
	} {
		if got := owes(c.has, c.terminal, c.took); got != c.want {
			t.Errorf("%s: owes = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestNextTakes(t *testing.T) {
	first := []takes{{Since: 0, Sources: []string{"a", "b"}, Events: []string{"x.*"}}}
	for _, c := range []struct {
		name            string
		history         []takes
		sources, events []string
		want            []takes
		changed         bool
	}{
		{"first, sorted", nil, []string{"b", "a"}, []string{"x.*"}, first, true},
		{"same in another order", first, []string{"b", "a"}, []string{"x.*"}, first, false},
		{"sources widened", first, []string{"a", "b", "c"}, []string{"x.*"},
			append(slices.Clone(first), takes{Since: 100, Sources: []string{"a", "b", "c"}, Events: []string{"x.*"}}), true},
		{"events removed: every type", first, []string{"a", "b"}, nil,
			append(slices.Clone(first), takes{Since: 100, Sources: []string{"a", "b"}}), true},
		{"a clock behind the last change", []takes{{Since: 500, Sources: []string{"a"}}}, []string{"b"}, nil,
			[]takes{{Since: 500, Sources: []string{"a"}}, {Since: 500, Sources: []string{"b"}}}, true},
		{"removed: takes nothing", first, nil, nil, append(slices.Clone(first), takes{Since: 100}), true},
		{"removed already", []takes{{Since: 50}}, nil, nil, []takes{{Since: 50}}, false},
	} {
		got, changed := nextTakes(slices.Clone(c.history), 0, 100, c.sources, c.events)
		if changed != c.changed || !slices.EqualFunc(got, c.want, func(a, b takes) bool {
			return a.Since == b.Since && a.same(b.Sources, b.Events)
		}) {
			t.Errorf("%s: got %+v, %v; want %+v, %v", c.name, got, changed, c.want, c.changed)
		}
	}
	var h []takes
	for i := range routeTakesKept + 5 {
		h, _ = nextTakes(h, 0, int64(i), []string{string(rune('a' + i%2))}, nil)
	}
	if len(h) != routeTakesKept || h[len(h)-1].Since != routeTakesKept+4 {
		t.Errorf("history of %d changes: %d kept, last since %d; want %d, %d", routeTakesKept+5, len(h), h[len(h)-1].Since, routeTakesKept, routeTakesKept+4)
	}
}

func TestTookAt(t *testing.T) {
	h := []takes{
		{Since: 100, Sources: []string{"a"}, Events: []string{"invoice.*"}},
		{Since: 200, Sources: []string{"a"}, Events: []string{"invoice.*", "customer.*"}},
		{Since: 300, Sources: []string{"b"}},
		{Since: 300, Sources: []string{"a", "b"}}, // two changes in one ms: the last holds
	}
	for _, c := range []struct {
		name     string
		received int64
		source   string
		typ      string
		want     bool
	}{
		{"before the oldest change kept", 50, "b", "any", true},
		{"first config, matching", 100, "a", "invoice.paid", true},
		{"first config, type not taken yet", 150, "a", "customer.created", false},
		{"widened, new type", 200, "a", "customer.created", true},
		{"widened, source not taken yet", 250, "b", "invoice.paid", false},
		{"two changes at once: the last", 300, "a", "anything", true},
		{"after the last change", 1000, "b", "anything", true},
		{"after the last change, source never taken", 1000, "c", "anything", false},
	} {
		if got := tookAt(h, c.received, c.source, c.typ); got != c.want {
			t.Errorf("%s: tookAt(%d, %s, %s) = %v, want %v", c.name, c.received, c.source, c.typ, got, c.want)
		}
	}
}

// The relay's recovery asks Owed before the engine starts: what each route
// took since when is read for it, so a route added later is not owed the
// events received before it. (It read since 0 for every route then, and
// was owed them all.)
func TestOwedBeforeStart(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	st, err := store.Open(ctx, store.Config{Path: filepath.Join(t.TempDir(), "db")}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	received := time.Now().Add(-time.Hour)
	ev := &store.Event{Source: "stripe", ID: "evt_old", Type: "invoice.paid", Body: []byte(`{}`), ReceivedAt: received}
	if _, err := st.Claim(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if err := st.MarkPublished(ctx, []store.Published{{Seq: ev.Seq, StreamSeq: 1}}, received); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{routesSinceKept: "1", routeSincePrefix + "late": fmt.Sprint(received.Add(time.Minute).UnixMilli())} {
		if err := st.SetMeta(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	e, err := New([]Route{{Name: "late", Sources: []string{"stripe"}, URL: "http://127.0.0.1:1/"}},
		st, nil, Config{Metrics: NewMetrics(prometheus.NewRegistry())}, log)
	if err != nil {
		t.Fatal(err)
	}
	lost, pending, reset, err := e.Owed(ctx, -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(lost)+len(pending)+len(reset) != 0 {
		t.Errorf("Owed before Start = %v, %v, %v; want nothing (the route came after the event)", lost, pending, reset)
	}
}
