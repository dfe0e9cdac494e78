package jetstream

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// validSubject reports whether s is a subject a client may publish to:
// tokens of letters, digits, '-' and '_' only, none empty.
func validSubject(s string) bool {
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" {
			return false
		}
		for i := 0; i < len(tok); i++ {
			c := tok[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// Any type makes a short, valid subject under webhooks.<source>.: one too
// long for a subject becomes a hash token, one per type.
func TestSubjectAnyType(t *testing.T) {
	long := "invoice." + strings.Repeat("x", 4052)
	dots := strings.Repeat(".", 200)
	longest := strings.Repeat("t", 255)
	tests := []struct{ typ, want string }{
		{longest, "webhooks.stripe." + longest},
		{longest + "t", "webhooks.stripe._h_"},
		{long, "webhooks.stripe._h_"},
		{dots, "webhooks.stripe._h_"},
		{strings.Repeat("a.", 127), "webhooks.stripe." + strings.Repeat("a.", 127) + "_"},
		{strings.Repeat("a.", 128), "webhooks.stripe._h_"},
		{strings.Repeat("\x01", 300), "webhooks.stripe._h_"},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		got := Subject("stripe", tt.typ)
		if !strings.HasPrefix(got, tt.want) || strings.HasSuffix(tt.want, "_h_") && len(got) != len(tt.want)+32 {
			t.Errorf("Subject(type of %d bytes) = %q, want %q…", len(tt.typ), got, tt.want)
		}
		if !validSubject(got) || len(got) > len("webhooks.stripe.")+255 {
			t.Errorf("Subject(type of %d bytes) = %q: not a valid short subject", len(tt.typ), got)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("types of %d and %d bytes share the subject %q", len(other), len(tt.typ), got)
		}
		seen[got] = tt.typ
		if again := Subject("stripe", tt.typ); again != got {
			t.Errorf("Subject is not stable: %q then %q", got, again)
		}
	}
	if got := Subject("_task", strings.Repeat("k", 1000)); !strings.HasPrefix(got, "tasks._h_") {
		t.Errorf("long task type: %q", got)
	}
}

// An event stored with a 4,060-character type (before types were bounded
// at intake) is published without NATS closing the connection, to a
// subject the source's consumers take, with its exact type in the header.
func TestLongTypePublishKeepsConnection(t *testing.T) {
	ctx := context.Background()
	b, err := Connect(ctx, Config{StoreDir: t.TempDir()}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cons, err := b.JetStream().CreateOrUpdateConsumer(ctx, b.Stream(), natsjs.ConsumerConfig{
		Durable: "route_r", AckPolicy: natsjs.AckExplicitPolicy, FilterSubjects: []string{SubjectPrefix + ".stripe.>"}})
	if err != nil {
		t.Fatal(err)
	}
	long := "invoice." + strings.Repeat("x", 4052)
	publish := func(typ, id string) error {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		msg := &nats.Msg{Subject: Subject("stripe", typ), Header: nats.Header{}, Data: []byte(`{}`)}
		msg.Header.Set(HeaderEventType, typ)
		msg.Header.Set(HeaderEventID, id)
		_, err := b.JetStream().PublishMsg(pctx, msg)
		return err
	}
	if err := publish(long, "evt_long"); err != nil {
		t.Fatalf("publishing the long-type event: %v (connection %s)", err, b.Conn().Status())
	}
	if err := publish("invoice.paid", "evt_after"); err != nil {
		t.Fatalf("publishing after the long-type event: %v (connection %s)", err, b.Conn().Status())
	}
	if !b.Conn().IsConnected() {
		t.Fatalf("connection %s after the long-type event", b.Conn().Status())
	}
	batch, err := cons.Fetch(2, natsjs.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for m := range batch.Messages() {
		types = append(types, m.Headers().Get(HeaderEventType))
		m.Ack()
	}
	if len(types) != 2 || types[0] != long || types[1] != "invoice.paid" {
		t.Fatalf("the consumer got %d messages (types of %d bytes…), want the long type then invoice.paid", len(types), len(strings.Join(types, "")))
	}
}
