package relay

import (
	"context"
	"fmt"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/jetstream"
)

// A stream another gateway made anew (deleted and made again, as a
// gateway starting beside this one does with an earlier version's
// stream), found by the idle relay's look, is prepared for once: the
// relay takes the new stream's creation for its own, not the one its
// broker last saw, and the next look finds the stream it prepared for.
func TestStreamMadeAnewByAnotherPreparedOnce(t *testing.T) {
	ctx := context.Background()
	st, b := storeAndBroker(t)
	owed := &owedAll{st: st, done: map[int64]bool{}}
	r := New(st, b, Config{Poll: time.Hour, Recovery: &Recovery{Store: st, Owed: owed}}, quietLog())
	for i := range 2 {
		claim(t, st, "stripe", fmt.Sprintf("evt_%d", i))
	}
	rs := &runState{healthyAt: time.Now(), checkedAt: time.Now()}
	if _, err := r.round(ctx, rs, nil); err != nil || !rs.prepared {
		t.Fatalf("first round: %v, prepared %v", err, rs.prepared)
	}

	// Another gateway: the stream deleted and made again, this broker
	// not told.
	js := b.JetStream()
	if err := js.DeleteStream(ctx, b.Stream()); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: b.Stream(), Retention: natsjs.LimitsPolicy,
		Subjects: []string{jetstream.SubjectPrefix + ".>", jetstream.TaskSubjectPrefix + ".>"}}); err != nil {
		t.Fatal(err)
	}
	state, err := b.StreamState(ctx)
	if err != nil {
		t.Fatal(err)
	}

	r.checkStream(ctx, rs)
	if rs.prepared {
		t.Fatal("the idle relay's look did not find the stream made anew")
	}
	waitFor(t, "the relay prepared for the new stream", 10*time.Second, func() (bool, string) {
		_, err := r.round(ctx, rs, nil)
		return rs.prepared, fmt.Sprintf("%v", err)
	})
	if !rs.preparedFor.Equal(state.Created) {
		t.Errorf("prepared for the stream created %v, want the new one, created %v", rs.preparedFor, state.Created)
	}
	if got := streamMsgs(t, b); got != 2 {
		t.Errorf("the new stream holds %d messages, want the 2 owed", got)
	}
	r.checkStream(ctx, rs)
	if !rs.prepared {
		t.Error("the next look took the stream prepared for as made anew again: recovery runs at every look")
	}
}
