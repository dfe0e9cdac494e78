package outbound

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/hookgate/hookgate/store"
)

// The default delivery state: one claim per (route, event) at a time,
// statuses and outcomes in the store.
func TestLocalState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{Path: filepath.Join(t.TempDir(), "hookgate.db")},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	var ds DeliveryState = newLocalState(st)
	key := func(route string, seq int64) DeliveryKey {
		return DeliveryKey{Route: route, Seq: seq, Source: "s", EventID: "e"}
	}

	if !ds.TryClaim(ctx, key("a", 1)) || ds.TryClaim(ctx, key("a", 1)) {
		t.Fatal("a second claim of (a, 1) while the first holds")
	}
	if !ds.TryClaim(ctx, key("b", 1)) || !ds.TryClaim(ctx, key("a", 2)) {
		t.Fatal("claims of another route or event must not wait")
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if ds.Claim(short, key("a", 1)) {
		t.Fatal("Claim of a held round returned true before its release")
	}
	ds.Release(key("a", 1))
	if !ds.Claim(ctx, key("a", 1)) {
		t.Fatal("Claim after release failed")
	}

	ev := &store.Event{Source: "s", ID: "e1", Type: "t", Body: []byte("{}")}
	seq, _, err := st.AdoptEvent(ctx, ev, 0)
	if err != nil {
		t.Fatal(err)
	}
	ev.Seq = seq
	if _, err := ds.Status(ctx, "a", ev.Seq, "s", "e1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("status before any round: %v, want not found", err)
	}
	d := &store.Delivery{EventSeq: ev.Seq, Route: "a", Source: "s", EventID: "e1", EventType: "t",
		IdempotencyKey: "k", State: store.StateRetrying, Rounds: 1, NextAttemptAt: time.Now().Add(time.Hour), LastStatus: 500}
	if err := ds.Record(ctx, d, []store.Attempt{{StartedAt: time.Now(), Status: 500}}); err != nil {
		t.Fatal(err)
	}
	got, err := ds.Status(ctx, "a", ev.Seq, "s", "e1")
	if err != nil || got.State != store.StateRetrying || got.Attempts != 1 || got.Rounds != 1 || got.ID != d.ID {
		t.Fatalf("status after a round: %+v, %v", got, err)
	}
}
