package relay

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hookgate/hookgate/jetstream"
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

func (o *owedAll) Owed(ctx context.Context, after int64) (lost, pending, reset []int64, err error) {
	o.mu.Lock()
	o.asks = append(o.asks, after)
	o.mu.Unlock()
	err = o.st.PublishedSince(ctx, after, map[string]store.RouteTakes{"r": {Sources: []string{"stripe"}}}, func(ev *store.Event, _ map[string]bool) error {
		if !o.done[ev.Seq] {
			lost = append(lost, ev.Seq)
		}
		return nil
	})
	return lost, nil, nil, err
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

// An event Requeue put back in the outbox anew (an operator's round cut
// short) is published as a new message inside the duplicate window of its
// first (the route's consumer may have acked that one), under an ID of
// that requeue, which drops a re-publish of the same requeue; one put
// back as it was (a round cut short, whose message is still the route's)
// is dropped as a duplicate of its first.
func TestRequeuedEventIsANewMessageInsideTheWindow(t *testing.T) {
	ctx := context.Background()
	st, b := storeAndBroker(t)
	outboxEmpty := func() (bool, string) {
		_, n, err := st.Counts(ctx)
		return err == nil && n == 0, fmt.Sprintf("outbox %d, err %v", n, err)
	}
	publishAll := func(what string) {
		t.Helper()
		r := New(st, b, Config{Poll: 20 * time.Millisecond}, quietLog())
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		r.Notify()
		waitFor(t, what, 10*time.Second, outboxEmpty)
		if err := r.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	claim(t, st, "stripe", "evt_r")
	publishAll("first publish")
	if err := st.Requeue(ctx, []int64{1}, nil); err != nil {
		t.Fatal(err)
	}
	publishAll("requeued as it was")
	if got := streamMsgs(t, b); got != 1 {
		t.Fatalf("stream holds %d messages, want 1 (the copy under the first ID dropped)", got)
	}
	if err := st.Requeue(ctx, []int64{1}, []int64{1}); err != nil {
		t.Fatal(err)
	}
	evs, err := st.Unpublished(ctx, 0, 10)
	if err != nil || len(evs) != 1 || evs[0].RequeuedAt.IsZero() {
		t.Fatalf("outbox after Requeue = %+v, %v; want evt_r with its requeue's time", evs, err)
	}
	requeued := evs[0]
	publishAll("requeued anew")
	if got := streamMsgs(t, b); got != 2 {
		t.Fatalf("stream holds %d messages, want 2 (the first and the requeued copy)", got)
	}
	s, err := b.JetStream().Stream(ctx, b.Stream())
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.GetMsg(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if id := first.Header.Get(nats.MsgIdHdr); id != "stripe:evt_r" {
		t.Errorf("first message's ID %q, want stripe:evt_r", id)
	}
	if id := again.Header.Get(nats.MsgIdHdr); id != jetstream.EventMsgID(&requeued) || id == "stripe:evt_r" {
		t.Errorf("requeued message's ID %q, want %q", id, jetstream.EventMsgID(&requeued))
	}
	if again.Header.Get(jetstream.HeaderEventID) != "evt_r" || again.Header.Get(jetstream.HeaderSeq) != "1" {
		t.Errorf("requeued message's headers %v: want the event's identity", again.Header)
	}

	// The same requeue published again (its ack lost) is a duplicate.
	f, err := b.PublishEvent(&requeued)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ack := <-f.Ok():
		if !ack.Duplicate || ack.Sequence != 2 {
			t.Fatalf("re-publish of the requeue: %+v, want a duplicate of sequence 2", ack)
		}
	case err := <-f.Err():
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("no ack")
	}
}
