package config

import (
	"os"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// The files that authenticate the connection to an external NATS are
// read at load, so that a wrong one is an error naming its key; an error
// never quotes a file's content.
func TestNATSAuthFiles(t *testing.T) {
	m := gatewaytest.NewMutualTLS(t)
	_, seed := gatewaytest.NkeyUser(t)
	creds := gatewaytest.OperatorMode(t, &server.Options{})
	notPEM := gatewaytest.WriteFile(t, "junk", []byte("SUSECRETSECRETSECRET not a certificate"))
	credsText, err := os.ReadFile(creds)
	if err != nil {
		t.Fatal(err)
	}
	brokenJWT := gatewaytest.WriteFile(t, "broken.creds", []byte(strings.Replace(string(credsText), "eyJ", "eyX", 1)))
	big := gatewaytest.WriteFile(t, "big", []byte(strings.Repeat("x", maxAuthFile+1)))
	nats := func(s string) string { return "nats: {url: 'tls://n1:4222', " + s + "}\n" + validBase }

	for _, ok := range []string{
		nats("credentials: " + creds),
		nats("credentials: " + seed),
		nats("tls: {ca_file: " + m.CAFile + "}"),
		nats("tls: {ca_file: " + m.CAFile + ", cert_file: " + m.CertFile + ", key_file: " + m.KeyFile + "}, credentials: " + creds),
	} {
		mustParse(t, ok, nil)
	}
	for _, tc := range []struct{ src, want string }{
		{"nats: {credentials: " + creds + "}\n" + validBase, "config: nats.credentials: needs nats.url: the embedded server is reached in process"},
		{"nats: {tls: {ca_file: " + m.CAFile + "}}\n" + validBase, "config: nats.tls.ca_file: needs nats.url: the embedded server is reached in process"},
		{nats("credentials: /nonexistent/x.creds"), "config: nats.credentials: open /nonexistent/x.creds: no such file or directory"},
		{nats("credentials: " + notPEM), "config: nats.credentials: " + notPEM + ": no user nkey seed found (want a credentials file as nsc writes it, or a user nkey seed)"},
		{nats("credentials: " + brokenJWT), "config: nats.credentials: " + brokenJWT + ": its user JWT does not parse"},
		{nats("credentials: " + big), "config: nats.credentials: " + big + ": larger than 1048576 bytes"},
		{nats("tls: {ca_file: " + notPEM + "}"), "config: nats.tls.ca_file: " + notPEM + ": no PEM certificate found"},
		{nats("tls: {cert_file: " + m.CertFile + "}"), "config: nats.tls.key_file: required with nats.tls.cert_file"},
		{nats("tls: {key_file: " + m.KeyFile + "}"), "config: nats.tls.cert_file: required with nats.tls.key_file"},
		{nats("tls: {cert_file: " + m.CertFile + ", key_file: " + notPEM + "}"), "config: nats.tls.cert_file: " + m.CertFile + " with " + notPEM + ": tls: failed to find any PEM data in key input"},
		{nats("tls: {cert_file: " + m.CAFile + ", key_file: " + m.KeyFile + "}"), "config: nats.tls.cert_file: " + m.CAFile + " with " + m.KeyFile + ": tls: private key does not match public key"},
	} {
		err := parseErr(t, tc.src, nil)
		if got := errorLines(err); len(got) != 1 || got[0] != tc.want {
			t.Errorf("got\n%v\nwant\n%s", err, tc.want)
		}
		if strings.Contains(err.Error(), "SECRET") {
			t.Errorf("the error quotes a file's content: %v", err)
		}
	}
}
