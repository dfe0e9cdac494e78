package jetstream

import (
	"context"
	"slices"
	"testing"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/store"
)

// Deployments on one NATS each have their events stream's subjects: a
// second deployment's stream is made beside the first's (JetStream
// refuses a stream whose subjects overlap another's), and each event
// goes to its deployment's stream alone.
func TestDeploymentsHaveTheirSubjects(t *testing.T) {
	ctx := context.Background()
	srv := gatewaytest.RunNATS(t, 0, t.TempDir())
	connect := func(stream string) *Broker {
		b, err := Connect(ctx, Config{URL: srv.ClientURL(), Stream: stream, Retention: "limits"}, quietLog())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		if err := b.EnsureStream(ctx); err != nil {
			t.Fatalf("stream %s: %v", stream, err)
		}
		return b
	}
	prod, staging := connect(DefaultStream), connect("STAGING_EVENTS")
	for _, b := range []*Broker{prod, staging} {
		for _, ev := range []*store.Event{{Source: "s", ID: "e1", Type: "t"}, {Source: store.TaskSource, ID: "t1", Type: "x"}} {
			f, err := b.PublishEvent(ev)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-f.Ok():
			case err := <-f.Err():
				t.Fatalf("%s: publish %s: %v", b.Stream(), ev.ID, err)
			}
		}
	}
	for b, want := range map[*Broker][]string{prod: {"webhooks.>", "tasks.>"},
		staging: {"webhooks_STAGING_EVENTS.>", "tasks_STAGING_EVENTS.>"}} {
		s, err := b.JetStream().Stream(ctx, b.Stream())
		if err != nil {
			t.Fatal(err)
		}
		info := s.CachedInfo()
		if !slices.Equal(info.Config.Subjects, want) || info.State.Msgs != 2 {
			t.Errorf("stream %s: subjects %v, %d messages; want %v, its event and task alone", b.Stream(),
				info.Config.Subjects, info.State.Msgs, want)
		}
	}
	if got, want := SubjectIn("STAGING_EVENTS", "s", "a.b"), "webhooks_STAGING_EVENTS.s.a.b"; got != want {
		t.Errorf("SubjectIn = %q, want %q", got, want)
	}
	if got, want := SubjectIn("STAGING_EVENTS", store.TaskSource, "t"), "tasks_STAGING_EVENTS.t"; got != want {
		t.Errorf("SubjectIn of a task = %q, want %q", got, want)
	}
	if got, want := SourceFilter("é+#", "s"), "webhooks_32a0f6f3def748b8.s.>"; got != want {
		t.Errorf("SourceFilter = %q, want %q", got, want)
	}
}

// The events stream of another nats.stream made by a version that gave
// it the default deployment's subjects is made anew with its own: the
// routes' consumers could not take what it holds, and a stream made anew
// is what the relay publishes again from the store.
func TestUnscopedStreamMadeAnew(t *testing.T) {
	ctx := context.Background()
	srv := gatewaytest.RunNATS(t, 0, t.TempDir())
	_, js := gatewaytest.ConnectJetStream(t, srv.ClientURL())
	old, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "STAGING_EVENTS",
		Subjects: []string{SubjectPrefix + ".>", TaskSubjectPrefix + ".>"}, Retention: natsjs.LimitsPolicy})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, Subject("s", "t"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	b, err := Connect(ctx, Config{URL: srv.ClientURL(), Stream: "STAGING_EVENTS"}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	s, err := js.Stream(ctx, "STAGING_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	info := s.CachedInfo()
	if info.Created.Equal(old.CachedInfo().Created) || info.State.Msgs != 0 {
		t.Errorf("the stream was kept (created %v, %d messages): want it made anew", info.Created, info.State.Msgs)
	}
	if want := []string{"webhooks_STAGING_EVENTS.>", "tasks_STAGING_EVENTS.>"}; !slices.Equal(info.Config.Subjects, want) {
		t.Errorf("subjects %v, want %v", info.Config.Subjects, want)
	}
}
