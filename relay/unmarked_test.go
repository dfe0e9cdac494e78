package relay

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Acks the store could not record, of a stream then created anew (a
// repair, or deleted), are not recorded after the new stream's recovery:
// their events stay in the outbox and are published to the new stream.
func TestUnmarkedAcksOfStreamBeforeDropped(t *testing.T) {
	ctx := context.Background()
	st, b := storeAndBroker(t)
	ob := &refusingOutbox{Store: st}
	owed := &owedAll{st: st, done: map[int64]bool{}}
	r := New(ob, b, Config{Poll: time.Hour, Recovery: &Recovery{Store: st, Owed: owed}}, quietLog())
	for i := range 3 {
		claim(t, st, "stripe", fmt.Sprintf("evt_%d", i))
	}
	rs := &runState{healthyAt: time.Now(), checkedAt: time.Now()}
	ob.refuse.Store(1) // the record of the first batch's acks fails (a full disk)
	if _, err := r.round(ctx, rs, nil); err == nil || len(r.unmarked) != 3 {
		t.Fatalf("round with the record refused: %v, %d acks unrecorded; want an error and 3", err, len(r.unmarked))
	}
	if err := b.JetStream().DeleteStream(ctx, b.Stream()); err != nil {
		t.Fatal(err)
	}
	b.ForgetStream()
	rs.prepared = false // as repairStalled and recheckStream do
	for i := range 3 {
		claim(t, st, "stripe", fmt.Sprintf("evt_new_%d", i))
	}
	waitFor(t, "every event in the new stream", 20*time.Second, func() (bool, string) {
		_, err := r.round(ctx, rs, nil)
		got := streamMsgs(t, b)
		return got == 6, fmt.Sprintf("%d in the stream, %v", got, err)
	})
	if _, inOutbox, err := st.Counts(ctx); err != nil || inOutbox != 0 {
		t.Fatalf("outbox %d, %v; want empty", inOutbox, err)
	}
}
