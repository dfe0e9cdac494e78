package relay

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/store"
)

// owedAll owes every published event it is asked about, except those in
// done, and records each question.
type owedAll struct {
	st   *store.Store
	done map[int64]bool
	mu   sync.Mutex
	asks []int64
}

func (o *owedAll) Owed(ctx context.Context, after int64) (lost, pending []int64, err error) {
	o.mu.Lock()
	o.asks = append(o.asks, after)
	o.mu.Unlock()
	err = o.st.PublishedSince(ctx, after, map[string]store.RouteTakes{"r": {Sources: []string{"stripe"}}}, func(ev *store.Event, _ map[string]bool) error {
		if !o.done[ev.Seq] {
			lost = append(lost, ev.Seq)
		}
		return nil
	})
	return lost, nil, err
}

func (o *owedAll) questions() []int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.asks)
}

// A relay started on a stream created anew asks which events are still
// owed, every published one in question, and publishes those again; on
// the same stream it asks only about what is past the stream's last
// sequence.
func TestRelayRecoversWhatTheStreamLost(t *testing.T) {
	ctx := context.Background()
	st, b := storeAndBroker(t)
	outboxEmpty := func() (bool, string) {
		_, n, err := st.Counts(ctx)
		return err == nil && n == 0, fmt.Sprintf("outbox %d, err %v", n, err)
	}
	owed := &owedAll{st: st, done: map[int64]bool{1: true}}
	run := func(what string) {
		t.Helper()
		asked := len(owed.questions()) // before Start: its recovery may ask at once
		r := New(st, b, Config{Poll: 20 * time.Millisecond, Recovery: &Recovery{Store: st, Owed: owed}}, quietLog())
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		r.Notify()
		waitFor(t, what, 10*time.Second, func() (bool, string) {
			// Recovery ends by recording the stream it recovered.
			state, err := b.StreamState(ctx)
			if err != nil {
				return false, err.Error()
			}
			known, _ := st.Meta(ctx, metaStreamCreated)
			recovered := known == state.Created.UTC().Format(time.RFC3339Nano)
			ok, why := outboxEmpty()
			n := len(owed.questions())
			return ok && n > asked && recovered, fmt.Sprintf("%s, asked %d times, recovered %v", why, n, recovered)
		})
		if err := r.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		claim(t, st, "stripe", fmt.Sprintf("evt_%d", i))
	}
	run("first publish")
	if got := streamMsgs(t, b); got != 4 {
		t.Fatalf("stream holds %d messages, want 4", got)
	}

	// The same stream: only what is past its last sequence is in question.
	run("second start")
	if got := owed.questions(); !slices.Equal(got, []int64{-1, 4}) {
		t.Fatalf("Owed asked after %v, want [-1 (no stream known) 4 (the stream's last)]", got)
	}

	// A stream created anew holds nothing published before: every event
	// is in question, and those owed (all but seq 1) are published again.
	if err := b.JetStream().DeleteStream(ctx, b.Stream()); err != nil {
		t.Fatal(err)
	}
	b.ForgetStream()
	run("republished")
	if got := owed.questions(); !slices.Equal(got, []int64{-1, 4, -1}) {
		t.Fatalf("Owed asked after %v, want [-1 4 -1]", got)
	}
	if got := streamMsgs(t, b); got != 3 {
		t.Fatalf("the new stream holds %d messages, want the 3 owed", got)
	}
}
