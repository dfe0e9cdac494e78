package gatewaytest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// MutualTLS is a private CA's files for a NATS server on 127.0.0.1 that
// verifies its clients' certificates.
type MutualTLS struct {
	CAFile, CertFile, KeyFile string      // the CA, and a client certificate and key it signed
	Server                    *tls.Config // the server's: its certificate, client certificates required
}

// NewMutualTLS makes a CA, a server certificate for 127.0.0.1 and a client
// certificate, each file in a temporary directory.
func NewMutualTLS(t testing.TB) MutualTLS {
	t.Helper()
	ca, caKey := testCert(t, "hookgate test CA", nil, nil)
	srv, srvKey := testCert(t, "127.0.0.1", ca, caKey)
	cli, cliKey := testCert(t, "hookgate", ca, caKey)
	pair, err := tls.X509KeyPair(certPEM(srv), keyPEM(t, srvKey))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return MutualTLS{
		CAFile:   WriteFile(t, "ca.pem", certPEM(ca)),
		CertFile: WriteFile(t, "client.pem", certPEM(cli)),
		KeyFile:  WriteFile(t, "client.key", keyPEM(t, cliKey)),
		Server: &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool,
			ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12},
	}
}

// NkeyUser makes a user nkey: its public key, for server.Options.Nkeys,
// and a file holding its seed.
func NkeyUser(t testing.TB) (pub, seedFile string) {
	t.Helper()
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ = user.PublicKey()
	seed, _ := user.Seed()
	return pub, WriteFile(t, "user.nk", seed)
}

// OperatorMode sets opts up for decentralized auth (an operator, a system
// account and an account with JetStream, in memory) and returns a
// credentials file of a user of that account.
func OperatorMode(t testing.TB, opts *server.Options) (credsFile string) {
	t.Helper()
	op, _ := nkeys.CreateOperator()
	opPub, _ := op.PublicKey()
	opJWT, err := jwt.NewOperatorClaims(opPub).Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	opClaims, err := jwt.DecodeOperatorClaims(opJWT)
	if err != nil {
		t.Fatal(err)
	}
	resolver := &server.MemAccResolver{}
	account := func(js bool) (nkeys.KeyPair, string) {
		kp, _ := nkeys.CreateAccount()
		pub, _ := kp.PublicKey()
		ac := jwt.NewAccountClaims(pub)
		if js {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		tok, err := ac.Encode(op)
		if err != nil {
			t.Fatal(err)
		}
		if err := resolver.Store(pub, tok); err != nil {
			t.Fatal(err)
		}
		return kp, pub
	}
	_, sysPub := account(false)
	acc, _ := account(true)
	user, _ := nkeys.CreateUser()
	userPub, _ := user.PublicKey()
	userJWT, err := jwt.NewUserClaims(userPub).Encode(acc)
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := user.Seed()
	creds, err := jwt.FormatUserConfig(userJWT, seed)
	if err != nil {
		t.Fatal(err)
	}
	opts.TrustedOperators, opts.SystemAccount, opts.AccountResolver = []*jwt.OperatorClaims{opClaims}, sysPub, resolver
	return WriteFile(t, "hookgate.creds", creds)
}

// WriteFile writes b to a file named name in a temporary directory, mode
// 0600, and returns its path.
func WriteFile(t testing.TB, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// testCert makes an ECDSA certificate for name, signed by parent (self
// signed, a CA, when parent is nil). A name that is an IP is its SAN.
func testCert(t testing.TB, name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if ip := net.ParseIP(name); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	signer, signerKey := tmpl, key
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	} else {
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func certPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func keyPEM(t testing.TB, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}
