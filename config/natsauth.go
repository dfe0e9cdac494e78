package config

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"os"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// maxAuthFile bounds what is read of a credentials, key or certificate
// file: each is a few KiB.
const maxAuthFile = 1 << 20

// natsAuth checks the files that authenticate the connection to an
// external NATS as nats.go reads them, so that a wrong path or file is an
// error at start naming its key, not a connect that retries forever. An
// error never quotes a file's content: it may hold a seed or a key.
func (v *validator) natsAuth(n *NATS) {
	if n.URL == "" {
		for _, f := range []struct{ key, path string }{
			{"nats.credentials", n.Credentials}, {"nats.tls.ca_file", n.TLS.CAFile},
			{"nats.tls.cert_file", n.TLS.CertFile}, {"nats.tls.key_file", n.TLS.KeyFile},
		} {
			if f.path != "" {
				v.errorf(f.key, "needs nats.url: the embedded server is reached in process")
				return
			}
		}
		return
	}
	if n.Credentials != "" {
		if b, ok := v.authFile("nats.credentials", n.Credentials); ok {
			switch {
			case !userSeed(b):
				v.errorf("nats.credentials", "%s: no user nkey seed found (want a credentials file as nsc writes it, or a user nkey seed)", n.Credentials)
			case !userJWT(b):
				v.errorf("nats.credentials", "%s: its user JWT does not parse", n.Credentials)
			}
		}
	}
	if n.TLS.CAFile != "" {
		if b, ok := v.authFile("nats.tls.ca_file", n.TLS.CAFile); ok && !x509.NewCertPool().AppendCertsFromPEM(b) {
			v.errorf("nats.tls.ca_file", "%s: no PEM certificate found", n.TLS.CAFile)
		}
	}
	v.natsClientCert(&n.TLS)
}

// natsClientCert checks nats.tls's client certificate and key.
func (v *validator) natsClientCert(t *NATSTLS) {
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		v.errorf("nats.tls.key_file", "required with nats.tls.cert_file")
	case t.KeyFile != "" && t.CertFile == "":
		v.errorf("nats.tls.cert_file", "required with nats.tls.key_file")
	case t.CertFile != "":
		cert, okc := v.authFile("nats.tls.cert_file", t.CertFile)
		key, okk := v.authFile("nats.tls.key_file", t.KeyFile)
		if okc && okk {
			if _, err := tls.X509KeyPair(cert, key); err != nil {
				// crypto/tls's errors name what is wrong, never the key.
				v.errorf("nats.tls.cert_file", "%s with %s: %v", t.CertFile, t.KeyFile, err)
			}
		}
	}
}

// authFile reads the file at path for key p, at most maxAuthFile bytes.
func (v *validator) authFile(p, path string) ([]byte, bool) {
	f, err := os.Open(path)
	if err != nil {
		v.errorf(p, "%v", err)
		return nil, false
	}
	defer func() { _ = f.Close() }() // read only
	b, err := io.ReadAll(io.LimitReader(f, maxAuthFile+1))
	if err != nil {
		v.errorf(p, "%v", err)
		return nil, false
	}
	if len(b) > maxAuthFile {
		v.errorf(p, "%s: larger than %d bytes", path, maxAuthFile)
		return nil, false
	}
	return b, true
}

// userJWT reports whether b holds no JWT block (a seed alone) or one
// whose user JWT parses.
func userJWT(b []byte) bool {
	tok, err := nkeys.ParseDecoratedJWT(b)
	if err != nil {
		return false
	}
	if tok == string(b) { // no JWT block
		return true
	}
	_, err = jwt.DecodeUserClaims(tok)
	return err == nil
}

// userSeed reports whether b holds a user nkey seed, alone or decorated
// as in a credentials file.
func userSeed(b []byte) bool {
	kp, err := nkeys.ParseDecoratedUserNKey(b)
	if err != nil {
		return false
	}
	kp.Wipe()
	return true
}
