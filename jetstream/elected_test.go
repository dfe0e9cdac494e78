package jetstream

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// A leader elected in the account (here the events stream's, after its
// leader steps down) ends what waits under UntilElected and closes what
// Elected returned, so a request made while there was no leader is given
// up then and made again.
func TestUntilElectedEndsAtElection(t *testing.T) {
	ctx := context.Background()
	b := connectReplicated(t)
	gatewaytest.WaitFor(t, "the events stream", 30*time.Second, func() (bool, string) {
		err := b.EnsureStream(ctx)
		return err == nil, errString(err)
	})
	elected := b.Elected()
	ectx, cancel := b.UntilElected(ctx)
	defer cancel()

	resp, err := b.Conn().Request("$JS.API.STREAM.LEADER.STEPDOWN.EVENTS", nil, 10*time.Second)
	if err != nil {
		t.Fatalf("step down: %v", err)
	}
	t.Logf("step down: %s", resp.Data)
	gatewaytest.WaitFor(t, "the wait to end at the new leader's election", 30*time.Second, func() (bool, string) {
		return ectx.Err() != nil, "still waiting"
	})
	select {
	case <-elected:
	default:
		t.Fatal("Elected's channel not closed at the election")
	}
	if err := ctx.Err(); err != nil {
		t.Fatalf("the parent ended: %v", err)
	}
}

// The elections of the stream and consumers EnsureTopology creates, or a
// route's pull loop next to it, are announced after their creation
// answered: an update made meanwhile is given up at one, and made again.
func TestEnsureTopologyOnNewReplicatedStream(t *testing.T) {
	ctx := context.Background()
	b := connectReplicated(t)
	var set ConsumerSet
	var want []string
	for i := range 4 {
		name := fmt.Sprint("route_", i)
		set.Consumers = append(set.Consumers, natsjs.ConsumerConfig{Durable: name, AckPolicy: natsjs.AckExplicitPolicy})
		want = append(want, name)
	}
	b.Declare(set)
	if err := b.EnsureTopology(ctx); err != nil {
		t.Fatalf("EnsureTopology of a new stream: %v", err)
	}
	if got := consumerNames(t, b); !slices.Equal(got, want) {
		t.Fatalf("consumers = %v, want %v", got, want)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Only the events stream's elections (its own, its consumers') end its
// waits: another stream's, in an account shared with another deployment
// or application, would cut its requests short in a storm of them.
func TestElectedOfAnotherStreamIgnored(t *testing.T) {
	b := New(Config{URL: "nats://127.0.0.1:1", Stream: "EVENTS"}, quietLog())
	elected := b.Elected()
	ectx, cancel := b.UntilElected(context.Background())
	defer cancel()
	for _, subj := range []string{
		"$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.OTHER",
		"$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.OTHER.route_a",
		"$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.EVENTS_STAGING",
		"$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.KV_HOOKGATE_CLAIMS",
	} {
		b.elections.elected(&nats.Msg{Subject: subj})
		select {
		case <-elected:
			t.Fatalf("%s ended the events stream's wait", subj)
		default:
		}
	}
	b.elections.elected(&nats.Msg{Subject: "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.EVENTS.route_a"})
	select {
	case <-elected:
	default:
		t.Fatal("the election of the events stream's consumer did not end its wait")
	}
	gatewaytest.WaitFor(t, "the wait under UntilElected to end", 10*time.Second, func() (bool, string) {
		return ectx.Err() != nil, "still waiting"
	})
}

// connectReplicated is a broker of the stream EVENTS with 3 replicas on a
// 3-node NATS cluster, closed when the test ends.
func connectReplicated(t *testing.T) *Broker {
	t.Helper()
	nc := gatewaytest.RunNATSCluster(t, 3)
	b, err := Connect(context.Background(), Config{URL: nc.URL, Stream: "EVENTS", Replicas: 3, ConnectTimeout: 5 * time.Second}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}
