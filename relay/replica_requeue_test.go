package relay

import (
	"context"
	"fmt"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/cluster"
	"github.com/hookgate/hookgate/store"
)

// owedAsEngine answers Owed as outbound.Engine does for one route r
// taking every source: published events whose delivery is not terminal
// (lost), pending deliveries (pending), those an operator reset (reset).
type owedAsEngine struct{ st *store.Store }

func (o owedAsEngine) Owed(ctx context.Context, after int64) (lost, pending, reset []int64, err error) {
	err = o.st.PublishedSince(ctx, after, map[string]store.RouteTakes{"r": {Sources: []string{"stripe"}}},
		func(ev *store.Event, deliveries map[string]bool) error {
			if terminal, has := deliveries["r"]; !has || !terminal {
				lost = append(lost, ev.Seq)
			}
			return nil
		})
	if err != nil {
		return nil, nil, nil, err
	}
	err = o.st.PendingDeliveries(ctx, func(seq int64, _, _, _ string, operator bool) error {
		if operator {
			reset = append(reset, seq)
		} else {
			pending = append(pending, seq)
		}
		return nil
	})
	return lost, pending, reset, err
}

// An operator's retry on a gateway that has the event only as another's
// (its record; the claim is the origin's) is published anew from there
// at the next start. When the stream then loses that copy before the
// retry's round ran (a stream made anew), the retry is still owed: the
// gateway that published the copy publishes it again. (The origin does
// not: its own delivery row is still the one before the retry.)
func TestReplicaRequeuedAnewLostFromStreamIsPublishedAgain(t *testing.T) {
	ctx := context.Background()
	st, b := storeAndBroker(t)
	claims := func(gateway string) *cluster.Claims {
		c, err := cluster.New(cluster.Config{Gateway: gateway, TTL: time.Hour,
			JetStream: func() natsjs.JetStream { return b.JetStream() }})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if mine, _, err := claims("gw-origin").Claim(ctx, "stripe", "evt_x", 1); err != nil || !mine {
		t.Fatalf("the origin's claim: mine=%v %v", mine, err)
	}
	rec := store.Record{Event: &store.EventRecord{Origin: "gw-origin", Source: "stripe", ID: "evt_x",
		Type: "invoice.paid", ReceivedAt: time.Now().UnixMilli(), Body: []byte(`{"id":"evt_x"}`)}}
	if err := st.ApplyRecords(ctx, []store.Record{rec}, 1); err != nil {
		t.Fatal(err)
	}
	ev, err := st.GetEvent(ctx, "stripe", "evt_x")
	if err != nil {
		t.Fatal(err)
	}
	// The operator's retry here, cut short by a stop: pending, reset.
	if _, err := st.ResetDelivery(ctx, &store.Delivery{EventSeq: ev.Seq, Route: "r", Source: "stripe",
		EventID: "evt_x", EventType: "invoice.paid", IdempotencyKey: "k"}, nil); err != nil {
		t.Fatal(err)
	}
	start := func(what string) {
		t.Helper()
		pub := &ClaimingPublisher{Claims: claims("gw-me"), Next: b, Store: st, Log: quietLog()}
		r := New(st, b, Config{Poll: 20 * time.Millisecond, Publisher: pub,
			Recovery: &Recovery{Store: st, Owed: owedAsEngine{st: st}}}, quietLog())
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		waitFor(t, what, 20*time.Second, func() (bool, string) {
			state, err := b.StreamState(ctx)
			if err != nil {
				return false, err.Error()
			}
			known, _ := st.Meta(ctx, metaStreamCreated)
			recovered := known == state.Created.UTC().Format(time.RFC3339Nano)
			_, n, err := st.Counts(ctx)
			return recovered && err == nil && n == 0, fmt.Sprintf("recovered %v, outbox %d (%v)", recovered, n, err)
		})
		if err := r.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	start("the next start")
	if got := streamMsgs(t, b); got != 1 {
		t.Fatalf("after the next start the stream holds %d messages, want 1 (the retry's copy)", got)
	}

	// The stream is made anew before the retry's round ran.
	if err := b.JetStream().DeleteStream(ctx, b.Stream()); err != nil {
		t.Fatal(err)
	}
	b.ForgetStream()
	start("the start after the stream was made anew")
	d, err := st.Delivery(ctx, "r", "stripe", "evt_x")
	if err != nil {
		t.Fatal(err)
	}
	holder, _ := st.HolderElsewhere(ctx, ev.Seq)
	if got := streamMsgs(t, b); got != 1 {
		t.Fatalf("the new stream holds %d messages, want 1 (the retry's copy again); delivery %s, recorded as held by %q",
			got, d.State, holder)
	}
}
