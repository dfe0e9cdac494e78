package outbound

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/hookgate/hookgate/store"
)

// screen: a passing filter runs the round; a rejecting or failing one
// records the delivery filtered (terminal, no attempt, rounds kept, the
// failure as last error) and acks its message, whatever stood before.
func TestScreen(t *testing.T) {
	next := time.Unix(1_700_000_000, 0)
	boom := errors.New("no such key: livemode")
	for _, tc := range []struct {
		name      string
		prev      store.DeliveryStatus
		pass      bool
		err       error
		run       bool
		rounds    int
		lastError string
	}{
		{"passes, new", store.DeliveryStatus{}, true, nil, true, 0, ""},
		{"passes, retrying", store.DeliveryStatus{State: store.StateRetrying, Rounds: 2, NextAttemptAt: next}, true, nil, true, 0, ""},
		{"rejects, new", store.DeliveryStatus{}, false, nil, false, 0, ""},
		{"rejects, pending (a replay)", store.DeliveryStatus{State: store.StatePending, Attempts: 3, Rounds: 1}, false, nil, false, 1, ""},
		{"rejects, retrying (filter added since)", store.DeliveryStatus{State: store.StateRetrying, Rounds: 2, NextAttemptAt: next}, false, nil, false, 2, ""},
		{"fails, new", store.DeliveryStatus{}, false, boom, false, 0, "filter: no such key: livemode"},
		{"fails although true", store.DeliveryStatus{}, true, boom, false, 0, "filter: no such key: livemode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run, d := screen(tc.prev, tc.pass, tc.err)
			if run != tc.run {
				t.Fatalf("run = %v, want %v", run, tc.run)
			}
			if run {
				if d.record {
					t.Errorf("a passing filter records: %+v", d)
				}
				return
			}
			want := decision{record: true, outcome: outcomeFiltered, health: noWord, then: actAck,
				next: change{state: store.StateFiltered, rounds: tc.rounds, lastError: tc.lastError}}
			if d != want {
				t.Errorf("decision = %+v, want %+v", d, want)
			}
		})
	}
}

// countingHandler counts the records at or above Warn.
type countingHandler struct {
	slog.Handler
	warns *atomic.Int32
}

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.warns.Add(1)
	}
	return nil
}

// A failing filter is counted each time and logged at most once per
// route and minute.
func TestFilterErrorLoggedOncePerMinute(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	st, err := store.Open(ctx, store.Config{Path: filepath.Join(t.TempDir(), "db")}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var warns atomic.Int32
	reg := prometheus.NewRegistry()
	e, err := New([]Route{{Name: "live", Sources: []string{"stripe"}, URL: "http://127.0.0.1:1/", Filter: "body.livemode"}},
		st, nil, Config{Metrics: NewMetrics(reg)}, slog.New(countingHandler{slog.DiscardHandler, &warns}))
	if err != nil {
		t.Fatal(err)
	}
	r := e.byName["live"]
	for i := range 5 {
		ev := &store.Event{Source: "stripe", ID: fmt.Sprintf("evt_%d", i), Type: "t", Body: []byte(`{"object":"event"}`),
			ReceivedAt: time.Now()}
		if _, err := st.Claim(ctx, ev); err != nil {
			t.Fatal(err)
		}
		env, _ := envelopeOf(ev.Seq, ev.Source, ev.ID, ev.Type, "", ev.Body)
		if filtered, act := e.filtered(ctx, r, env, store.DeliveryStatus{}); !filtered || act != actAck {
			t.Fatalf("event %d: filtered %v, %+v", i, filtered, act)
		}
		d, err := st.Delivery(ctx, "live", "stripe", ev.ID)
		if err != nil || d.State != store.StateFiltered || !strings.Contains(d.LastError, "livemode") {
			t.Fatalf("event %d: %+v, %v", i, d, err)
		}
	}
	if n := warns.Load(); n != 1 {
		t.Errorf("%d warnings for 5 filter errors in a minute, want 1", n)
	}
	if n := testutil.ToFloat64(e.cfg.Metrics.filterErrors.WithLabelValues("live")); n != 5 {
		t.Errorf("hookgate_route_filter_errors_total = %v, want 5", n)
	}
	// A minute on, the next error is logged again.
	r.filterLogged.Add(-int64(filterLogEvery))
	ev := &store.Event{Source: "stripe", ID: "evt_later", Type: "t", Body: []byte(`{}`), ReceivedAt: time.Now()}
	if _, err := st.Claim(ctx, ev); err != nil {
		t.Fatal(err)
	}
	env, _ := envelopeOf(ev.Seq, ev.Source, ev.ID, ev.Type, "", ev.Body)
	e.filtered(ctx, r, env, store.DeliveryStatus{})
	if n := warns.Load(); n != 2 {
		t.Errorf("%d warnings after a minute, want 2", n)
	}
}

// A filter error past maxFilterErrLen is cut on a rune boundary: the
// delivery's last error stays valid UTF-8 and within the bound.
func TestFilterErrorCutOnRune(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{Path: filepath.Join(t.TempDir(), "db")}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// Each é is 2 bytes: one of them straddles byte 200.
	key := strings.Repeat("é", 150)
	e, err := New([]Route{{Name: "live", Sources: []string{"stripe"}, URL: "http://127.0.0.1:1/", Filter: `body["` + key + `"] == 1`}},
		st, nil, Config{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ev := &store.Event{Source: "stripe", ID: "evt_1", Type: "t", Body: []byte(`{}`), ReceivedAt: time.Now()}
	if _, err := st.Claim(ctx, ev); err != nil {
		t.Fatal(err)
	}
	env, _ := envelopeOf(ev.Seq, ev.Source, ev.ID, ev.Type, "", ev.Body)
	if filtered, _ := e.filtered(ctx, e.byName["live"], env, store.DeliveryStatus{}); !filtered {
		t.Fatal("not filtered")
	}
	d, err := st.Delivery(ctx, "live", "stripe", ev.ID)
	if err != nil {
		t.Fatal(err)
	}
	if msg := strings.TrimPrefix(d.LastError, "filter: "); !utf8.ValidString(msg) || len(msg) > maxFilterErrLen ||
		!strings.Contains(msg, "no such key: é") || !strings.HasSuffix(msg, "é…") {
		t.Errorf("last error of %d bytes, valid UTF-8 %v: %q; want at most %d, cut after a whole é",
			len(msg), utf8.ValidString(msg), msg, maxFilterErrLen)
	}
}
