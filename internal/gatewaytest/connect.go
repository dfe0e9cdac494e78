package gatewaytest

import (
	"testing"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// ConnectJetStream connects to the NATS server at url and returns its
// JetStream API; the connection closes when the test ends.
func ConnectJetStream(t testing.TB, url string) (*nats.Conn, natsjs.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}
