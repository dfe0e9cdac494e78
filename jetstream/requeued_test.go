package jetstream

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hookgate/hookgate/store"
)

func TestRequeued(t *testing.T) {
	first := &store.Event{Source: "stripe", ID: "evt_1/requeued-5"}
	anew := &store.Event{Source: "stripe", ID: "evt_1", RequeuedAt: time.UnixMilli(1_700_000_000_000)}
	for _, c := range []struct {
		name string
		id   string
		want bool
	}{
		{"first publication", EventMsgID(first), false},
		{"published anew", EventMsgID(anew), true},
		{"no message ID", "", false},
	} {
		h := nats.Header{}
		if c.id != "" {
			h.Set(nats.MsgIdHdr, c.id)
		}
		if got := Requeued(h); got != c.want {
			t.Errorf("%s (%q): Requeued = %v, want %v", c.name, c.id, got, c.want)
		}
	}
}
