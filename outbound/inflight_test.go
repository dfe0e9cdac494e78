package outbound_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/jetstream"
	"github.com/hookgate/hookgate/store"
)

// Two copies of one event in the stream (a re-publish after the duplicate
// window: another Nats-Msg-Id) while the downstream is slow: the second
// copy waits for the first one's round instead of running its own beside
// it, then finds the delivery done. One request, both messages acked.
func TestSecondCopyWaitsForRunningRound(t *testing.T) {
	release := make(chan struct{})
	ds := newDownstream(t, func(w http.ResponseWriter, r *http.Request, n int) int {
		<-release
		w.WriteHeader(204)
		return 204
	})
	// The held request must outlast every wait below: at the route's
	// default timeout (15s) the attempt would end and its retry would
	// overlap the still-held handler, which reads as a second concurrent
	// request. A copy whose delivery was lost comes back after AckWait.
	g := startGateway(t, baseConfig(t, routeYAML("slow", ds.URL, ", concurrency: 4, timeout: 2m")))
	t.Cleanup(func() { // on failure, before the gateway stops
		select {
		case <-release:
		default:
			close(release)
		}
	})
	ctx := context.Background()
	js := g.Broker().JetStream()
	// The engine makes the route's consumer once JetStream answers, which
	// may be after Start returns; the stream keeps only what some consumer
	// wants, so a copy published before that would be dropped.
	var cons natsjs.Consumer
	waitFor(t, "the route's consumer", func() (bool, string) {
		var err error
		cons, err = js.Consumer(ctx, g.Broker().Stream(), "route_slow")
		return err == nil, fmt.Sprint(err)
	})
	// The first copy comes through intake and the relay; its request is
	// held. The second is the same event (seq, headers, body) under another
	// Nats-Msg-Id.
	g.send(t, "evt_twice", "invoice.paid")
	waitFor(t, "the first copy's request held", func() (bool, string) {
		return ds.inflight.Load() == 1, fmt.Sprint(ds.inflight.Load(), " in flight")
	})
	ev, err := g.Store().GetEvent(ctx, "stripe", "evt_twice")
	if err != nil {
		t.Fatal(err)
	}
	publishCopy(t, js, ev, "stripe:evt_twice:copy2")
	info := func() string {
		ci, err := cons.Info(ctx)
		if err != nil {
			return err.Error()
		}
		return fmt.Sprintf("delivered %d, ack pending %d, pending %d, requests %d",
			ci.Delivered.Consumer, ci.NumAckPending, ci.NumPending, len(ds.requests()))
	}

	// The second copy is handed back (and delivered again) rather than
	// sent.
	waitFor(t, "one request held and the second copy handed back", func() (bool, string) {
		if n := ds.inflight.Load(); n > 1 {
			t.Fatalf("%d concurrent requests for one event (%s)", n, info())
		}
		ci, err := cons.Info(ctx)
		if err != nil {
			return false, err.Error()
		}
		return ds.inflight.Load() == 1 && ci.Delivered.Consumer >= 3, info()
	})
	close(release)
	g.waitState(t, "slow", "stripe", "evt_twice", store.StateSucceeded)
	waitFor(t, "both copies acked", func() (bool, string) {
		ci, err := cons.Info(ctx)
		return err == nil && ci.NumAckPending == 0 && ci.NumPending == 0, info()
	})
	if n := len(ds.requests()); n != 1 {
		t.Fatalf("downstream got %d requests, want 1", n)
	}
	if d := g.delivery(t, "slow", "stripe", "evt_twice"); d.Attempts != 1 {
		t.Fatalf("delivery = %+v, want 1 attempt", *d)
	}
}

// publishCopy publishes ev to the stream again as the relay does, under
// the message ID msgID.
func publishCopy(t *testing.T, js natsjs.JetStream, ev *store.Event, msgID string) {
	t.Helper()
	msg := &nats.Msg{Subject: jetstream.Subject(ev.Source, ev.Type), Header: nats.Header{}, Data: ev.Body}
	msg.Header.Set(jetstream.HeaderSeq, strconv.FormatInt(ev.Seq, 10))
	msg.Header.Set(jetstream.HeaderSource, ev.Source)
	msg.Header.Set(jetstream.HeaderEventID, ev.ID)
	msg.Header.Set(jetstream.HeaderEventType, ev.Type)
	msg.Header.Set("Content-Type", ev.ContentType)
	msg.Header.Set(nats.MsgIdHdr, msgID)
	if _, err := js.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
}

// Messages whose Hookgate-Seq is not their event's in this store (none, or
// another event's: published before the store was replaced, or by another
// process) are delivered under the seq the store gives their event, once
// per event: they do not take the delivery of the event that has their seq
// here, nor send again an event already delivered.
func TestMessageFromElsewhereAdopted(t *testing.T) {
	ds := newDownstream(t, nil)
	g := startGateway(t, baseConfig(t, routeYAML("r", ds.URL, "")))
	ctx := context.Background()
	js := g.Broker().JetStream()
	g.send(t, "evt_local", "invoice.paid")
	g.waitState(t, "r", "stripe", "evt_local", store.StateSucceeded)
	local, err := g.Store().GetEvent(ctx, "stripe", "evt_local")
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range []struct{ seq, id string }{
		{"", "evt_noseq"},    // no header
		{"x7", "evt_badseq"}, // not a number
		{strconv.FormatInt(local.Seq, 10), "evt_foreign"},     // evt_local's seq here
		{strconv.FormatInt(local.Seq+500, 10), "evt_local"},   // evt_local under a seq it does not have here
		{strconv.FormatInt(local.Seq+500, 10), "evt_foreign"}, // again, under another seq
	} {
		msg := &nats.Msg{Subject: jetstream.Subject("stripe", "invoice.paid"), Header: nats.Header{},
			Data: []byte(`{"id":"` + m.id + `"}`)}
		if m.seq != "" {
			msg.Header.Set(jetstream.HeaderSeq, m.seq)
		}
		msg.Header.Set(jetstream.HeaderSource, "stripe")
		msg.Header.Set(jetstream.HeaderEventID, m.id)
		msg.Header.Set(jetstream.HeaderEventType, "invoice.paid")
		msg.Header.Set("Content-Type", "application/json")
		msg.Header.Set(nats.MsgIdHdr, fmt.Sprintf("elsewhere%d", i))
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
		if i == 2 { // the second copy of evt_foreign must find its first one's delivery
			g.waitState(t, "r", "stripe", "evt_foreign", store.StateSucceeded)
		}
	}
	for _, id := range []string{"evt_noseq", "evt_badseq", "evt_foreign"} {
		d := g.waitState(t, "r", "stripe", id, store.StateSucceeded)
		ev, err := g.Store().GetEvent(ctx, "stripe", id)
		if err != nil || d.EventSeq != ev.Seq || ev.Seq == local.Seq || d.Attempts != 1 {
			t.Fatalf("%s: delivery %+v, event %+v, %v; want one attempt under the event's own seq", id, d, ev, err)
		}
	}
	cons, err := js.Consumer(ctx, g.Broker().Stream(), "route_r")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every message settled", func() (bool, string) {
		ci, err := cons.Info(ctx)
		if err != nil {
			return false, err.Error()
		}
		return ci.Delivered.Consumer >= 6 && ci.NumAckPending == 0 && ci.NumPending == 0,
			fmt.Sprintf("delivered %d, ack pending %d, pending %d", ci.Delivered.Consumer, ci.NumAckPending, ci.NumPending)
	})
	// evt_local once, and each of the three others once.
	if n := len(ds.requests()); n != 4 {
		t.Fatalf("downstream got %d requests, want 4", n)
	}
	if d := g.delivery(t, "r", "stripe", "evt_local"); d.Attempts != 1 || d.EventSeq != local.Seq {
		t.Fatalf("evt_local's delivery = %+v, want its one attempt under seq %d", *d, local.Seq)
	}
}

// An operator's retry that waited for a running automatic round which then
// succeeded sends nothing: a succeeded delivery is not sent again.
func TestRetryAfterConcurrentSuccessSendsNothing(t *testing.T) {
	release := make(chan struct{})
	ds := newDownstream(t, func(w http.ResponseWriter, r *http.Request, n int) int {
		if n == 0 {
			w.WriteHeader(500)
			return 500
		}
		<-release // the second round is held
		w.WriteHeader(204)
		return 204
	})
	g := startGateway(t, baseConfig(t, routeYAML("r", ds.URL, ", retries: 0, schedule: [300ms]")))
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	g.send(t, "evt_race", "invoice.paid")
	d := g.waitState(t, "r", "stripe", "evt_race", store.StateRetrying)
	waitFor(t, "the second round held", func() (bool, string) {
		return ds.inflight.Load() == 1, fmt.Sprintf("%d requests, %d in flight", len(ds.requests()), ds.inflight.Load())
	})
	if code, body := g.api(t, http.MethodPost, "/v1/deliveries/"+d.UID+"/retry", apiToken); code != 202 {
		t.Fatalf("retry answered %d %s, want 202", code, body)
	}
	close(release)
	g.waitState(t, "r", "stripe", "evt_race", store.StateSucceeded)
	g.Stop(context.Background()) // waits for the operator's round
	if n := len(ds.requests()); n != 2 {
		t.Fatalf("downstream got %d requests, want 2 (the operator's retry came after the success)", n)
	}
}

// An operator's round of a delivery is queued once: while one waits or
// runs, another retry or a replay is answered 409 round_queued and sends
// nothing; once it is over, a retry is taken again.
func TestRetryQueuedOnce(t *testing.T) {
	release := make(chan struct{})
	ds := newDownstream(t, func(w http.ResponseWriter, r *http.Request, n int) int {
		if n == 2 { // after the two automatic rounds
			<-release // the first operator's round is held
		}
		w.WriteHeader(500)
		return 500
	})
	g := startGateway(t, baseConfig(t, routeYAML("r", ds.URL, ", retries: 0, schedule: [10ms]")))
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	g.send(t, "evt_flood", "invoice.paid")
	d := g.waitState(t, "r", "stripe", "evt_flood", store.StateDead)
	retry := "/v1/deliveries/" + d.UID + "/retry"
	if code, body := g.api(t, http.MethodPost, retry, apiToken); code != 202 {
		t.Fatalf("first retry answered %d %s, want 202", code, body)
	}
	waitFor(t, "the operator's round held", func() (bool, string) {
		return ds.inflight.Load() == 1, fmt.Sprintf("%d in flight", ds.inflight.Load())
	})
	for range 50 {
		if code, body := g.api(t, http.MethodPost, retry, apiToken); code != 409 || !strings.Contains(body, `"round_queued"`) {
			t.Fatalf("retry while one is queued answered %d %s, want 409 round_queued", code, body)
		}
	}
	if code, body := g.api(t, http.MethodPost, "/v1/events/stripe/evt_flood/replay", apiToken); code != 409 || !strings.Contains(body, `"round_queued"`) {
		t.Fatalf("replay while a retry is queued answered %d %s, want 409 round_queued", code, body)
	}
	close(release)
	g.waitState(t, "r", "stripe", "evt_flood", store.StateDead)
	waitFor(t, "a retry taken again", func() (bool, string) {
		code, body := g.api(t, http.MethodPost, retry, apiToken)
		return code == 202, fmt.Sprintf("%d %s", code, body)
	})
	g.Stop(context.Background()) // waits for the operator's rounds
	if n := len(ds.requests()); n != 4 {
		t.Fatalf("downstream got %d requests, want 4 (two automatic rounds, two operator's rounds)", n)
	}
}
