package jetstream

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// connectWith connects a broker to url with auth and checks that it
// reaches JetStream: its stream is made and a message goes through.
func connectWith(t *testing.T, url string, auth Auth) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := Connect(ctx, Config{URL: url, Stream: "EVENTS", ConnectTimeout: 10 * time.Second, Auth: auth},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	gatewaytest.WaitFor(t, "a connection", 15*time.Second, func() (bool, string) {
		return b.Conn().IsConnected(), b.Conn().Status().String()
	})
	if err := b.EnsureStream(ctx); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if _, err := b.JetStream().Publish(ctx, SubjectIn(b.Stream(), "src", "t"), []byte("{}")); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

// refused checks that the server at url refuses a client without the
// auth under test, so that connectWith's success is that auth's doing.
func refused(t *testing.T, url string, opts ...nats.Option) {
	t.Helper()
	nc, err := nats.Connect(url, append(opts, nats.NoReconnect(), nats.Timeout(5*time.Second))...)
	if err == nil {
		nc.Close()
		t.Fatal("the server took a client without the auth under test")
	}
}

// A server with a private CA that verifies its clients' certificates
// (mutual TLS) is reached with the CA in place of the system's roots and
// the client certificate.
func TestAuthMutualTLS(t *testing.T) {
	m := gatewaytest.NewMutualTLS(t)
	srv := gatewaytest.RunNATSWith(t, server.Options{StoreDir: t.TempDir(), TLS: true, TLSVerify: true, TLSTimeout: 5, TLSConfig: m.Server})
	url := fmt.Sprintf("tls://%s", srv.Addr())
	refused(t, url, nats.RootCAs(m.CAFile)) // no client certificate
	connectWith(t, url, Auth{CAFile: m.CAFile, CertFile: m.CertFile, KeyFile: m.KeyFile})
}

// A server that lists the user's public nkey is reached with a file
// holding its seed alone.
func TestAuthNkeySeedFile(t *testing.T) {
	pub, seedFile := gatewaytest.NkeyUser(t)
	srv := gatewaytest.RunNATSWith(t, server.Options{StoreDir: t.TempDir(), Nkeys: []*server.NkeyUser{{Nkey: pub}}})
	refused(t, srv.ClientURL())
	connectWith(t, srv.ClientURL(), Auth{Credentials: seedFile})
}

// A server in operator mode (decentralized auth, as Synadia Cloud runs)
// is reached with a credentials file, JetStream included.
func TestAuthCredentials(t *testing.T) {
	opts := server.Options{StoreDir: t.TempDir()}
	creds := gatewaytest.OperatorMode(t, &opts)
	srv := gatewaytest.RunNATSWith(t, opts)
	refused(t, srv.ClientURL())
	connectWith(t, srv.ClientURL(), Auth{Credentials: creds})
}
