package jetstream

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Auth is how the gateway proves itself to an external NATS and which
// servers it trusts. nats.go reads every file again at each connect and
// reconnect, so a renewed certificate or credentials file is used without
// a restart. The zero Auth adds nothing to the URL's own (a user:password
// or token in it, tls:// with the system's roots).
type Auth struct {
	// Credentials is a credentials file (a user JWT and its nkey seed, as
	// nsc writes it: operator mode), or a file holding only a user nkey
	// seed (a server that lists the user's public nkey).
	Credentials string
	// CAFile is a PEM bundle of the CAs that sign the servers'
	// certificates, in place of the system's roots. Setting it (or
	// CertFile) makes the connection TLS whatever the URL's scheme.
	CAFile string
	// CertFile and KeyFile are the PEM client certificate and key a
	// server that verifies clients asks for (mutual TLS). Both or neither.
	CertFile, KeyFile string
}

// maxCredentials bounds what is read of a credentials file: a few KiB.
const maxCredentials = 1 << 20

// options are the nats.go options for a. An error names the file that
// cannot be used, never its content.
func (a Auth) options() ([]nats.Option, error) {
	var opts []nats.Option
	if a.Credentials != "" {
		o, err := credentials(a.Credentials)
		if err != nil {
			return nil, fmt.Errorf("credentials: %w", err)
		}
		opts = append(opts, o)
	}
	if a.CAFile != "" {
		opts = append(opts, nats.RootCAs(a.CAFile))
	}
	if (a.CertFile == "") != (a.KeyFile == "") {
		return nil, errors.New("a client certificate needs both its cert and key files")
	}
	if a.CertFile != "" {
		opts = append(opts, nats.ClientCert(a.CertFile, a.KeyFile))
	}
	return opts, nil
}

// credentials is the option for the file at path: a user JWT with its
// seed, or a seed alone.
func credentials(path string) (nats.Option, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, maxCredentials))
	_ = f.Close() // read only
	if err != nil {
		return nil, err
	}
	tok, err := nkeys.ParseDecoratedJWT(b)
	decorated := err == nil && tok != string(b) // a JWT block, as nsc writes it
	clear(b)
	if decorated {
		return nats.UserCredentials(path), nil
	}
	return nats.NkeyOptionFromSeed(path)
}
