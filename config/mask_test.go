package config

import (
	"bytes"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

const maskTestYAML = `
nats:
  url: "nats://alice:natspass_0123456789@n1:4222, nats://natstoken_0123456789@n2:4222,nats://n3:4222"
sources:
  - name: stripe
    verify: stripe
    secrets: [whsec_stripe_0123456789abcdef, whsec_short]
  - name: gh
    verify: github
    secrets: ["${GH_SECRET}"]
api:
  tokens: [apitoken_0123456789abcdef]
tasks:
  tokens: [tasktoken_0123456789abcdef]
routes:
  - name: billing
    sources: [stripe, gh]
    events: ["invoice.*"]
    url: https://bob:urlpass_0123456789@billing.internal/hooks?src=hg&api_key=querykey_0123456789#frag
    secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
    headers:
      Authorization: Bearer bearer_0123456789abcdef
      proxy-authorization: Basic cHJveHk6cHJveHlwYXNz
      Cookie: session=cookie_0123456789
      X-Api-Key: xapikey_0123456789
      X-Auth-Token: short
      X-Client-Secret: clientsecret_0123456789
      X-DB-PASSWORD: dbpassword_0123456789
      X-Team: billing
  - name: plain
    sources: [gh]
    url: http://plain.internal/
`

// maskTestSecrets are the secrets in maskTestYAML (GH_SECRET's value too).
var maskTestSecrets = []string{
	"natspass_0123456789", "natstoken_0123456789", "whsec_stripe_0123456789abcdef",
	"whsec_short", "gh_secret_0123456789", "apitoken_0123456789abcdef", "urlpass_0123456789",
	"querykey_0123456789", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "bearer_0123456789abcdef",
	"cHJveHk6cHJveHlwYXNz", "cookie_0123456789", "xapikey_0123456789", "short",
	"clientsecret_0123456789", "dbpassword_0123456789", "tasktoken_0123456789abcdef",
}

func maskTestConfig(t *testing.T) *Config {
	t.Helper()
	c, err := Parse([]byte(maskTestYAML), func(name string) (string, bool) {
		if name == "GH_SECRET" {
			return "gh_secret_0123456789", true
		}
		return "", false
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestMaskSecret(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"a", "****"},
		{"whsec_short", "****"},                 // 11
		{"abcdefghijkl", "abc…(12 chars)"},      // 12: a quarter shown
		{"abcdefghijklmnop", "abcd…(16 chars)"}, // 16
		{"whsec_0123456789abcdefgh", "whsec_…(24 chars)"},               // 24
		{strings.Repeat("x", 100), "xxxxxx…(100 chars)"},                // never more than 6
		{"ééééééééééééééééééééééééé", "éééééé…(25 chars)"},              // runes, not bytes
		{"Bearer bearer_0123456789abcdef", "Bearer…(30 chars)"},         // 30
		{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_…(38 chars)"}, // 38
	}
	for _, tt := range tests {
		if got := MaskSecret(tt.in); got != tt.want {
			t.Errorf("MaskSecret(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// Each secret of the configuration prints as its mask and reveals itself
// only when asked.
func TestMasked(t *testing.T) {
	c := maskTestConfig(t)
	check := func(what, got, want string) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %q, want %q", what, got, want)
		}
	}
	check("nats.url", c.NATS.URL.String(), "nats://alice:****@n1:4222, nats://****@n2:4222,nats://n3:4222")
	check("sources[0].secrets[0]", c.Sources[0].Secrets[0].String(), "whsec_…(29 chars)")
	check("sources[0].secrets[1] (short)", c.Sources[0].Secrets[1].String(), "****")
	check("sources[1].secrets[0] (from env)", c.Sources[1].Secrets[0].String(), "gh_se…(20 chars)")
	check("api.tokens[0]", c.API.Tokens[0].String(), "apitok…(25 chars)")
	check("tasks.tokens[0]", c.Tasks.Tokens[0].String(), "taskto…(26 chars)")
	r := c.Routes[0]
	check("routes[0].url", r.URL.String(), "https://bob:****@billing.internal/hooks?src=hg&api_key=****#frag")
	check("routes[0].secret", r.Secret.String(), "whsec_…(38 chars)")
	h := r.Headers.masked()
	check("Authorization", h["Authorization"], "Bearer…(30 chars)")
	check("proxy-authorization", h["proxy-authorization"], "Basic …(26 chars)")
	check("Cookie", h["Cookie"], "sessio…(25 chars)")
	check("X-Api-Key", h["X-Api-Key"], "xapi…(18 chars)")
	check("X-Auth-Token (short)", h["X-Auth-Token"], "****")
	check("X-Client-Secret", h["X-Client-Secret"], "clien…(23 chars)")
	check("X-DB-PASSWORD", h["X-DB-PASSWORD"], "dbpas…(21 chars)")
	check("X-Team (not a secret)", h["X-Team"], "billing")
	check("routes[1].url", c.Routes[1].URL.String(), "http://plain.internal/")
	check("routes[1].secret (empty)", c.Routes[1].Secret.String(), "")
	if len(h) != len(r.Headers) || r.Headers["Authorization"] != "Bearer bearer_0123456789abcdef" {
		t.Errorf("masking changed the headers: %d of %d, %q", len(h), len(r.Headers), r.Headers["Authorization"])
	}
	if c.Routes[1].Headers.masked() != nil {
		t.Error("no headers masked to a non-nil map")
	}

	// Reveal gives the values themselves.
	check("routes[0].secret revealed", r.Secret.Reveal(), "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	check("routes[0].url revealed", r.URL.Reveal(), "https://bob:urlpass_0123456789@billing.internal/hooks?src=hg&api_key=querykey_0123456789#frag")
	check("nats.url revealed", c.NATS.URL.Reveal(), "nats://alice:natspass_0123456789@n1:4222, nats://natstoken_0123456789@n2:4222,nats://n3:4222")
	if got, want := c.Sources[0].Secrets.Reveal(), []string{"whsec_stripe_0123456789abcdef", "whsec_short"}; !slices.Equal(got, want) {
		t.Errorf("sources[0].secrets revealed = %q, want %q", got, want)
	}

	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range maskTestSecrets {
		// Secrets of 12 characters or more show at most their first 6.
		if strings.Contains(string(out), s) {
			t.Errorf("YAML contains the secret %q:\n%s", s, out)
		}
	}
}

func TestMaskURL(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"nats://u:p@h:4222", "nats://u:****@h:4222"},
		{"nats://tok@h:4222", "nats://****@h:4222"},
		{"nats://h:4222", "nats://h:4222"},
		{"u:p@h:4222", "u:****@h:4222"}, // no scheme
		{"nats://u:@h", "nats://u:@h"},  // empty password: nothing to hide
		{"nats://u:p@ss@h", "nats://u:****@h"},
		{"https://user@h/p", "https://****@h/p"},   // a user alone may be a proxy's API key
		{"https://h/p@x?a=1", "https://h/p@x?a=1"}, // '@' in the path is not userinfo
		{"https://h/p?Token=abc&x=1&access%5Ftoken=def&password=&key", "https://h/p?Token=****&x=1&access%5Ftoken=****&password=&key"},
		{"https://h/?sig=1#token=x", "https://h/?sig=1#token=x"},
		// Token-like path segments: Slack, Discord.
		{"https://hooks.slack.com/services/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",
			"https://hooks.slack.com/services/T0123ABCD/B0123ABCD/aB3dE5…(24 chars)"},
		{"https://discord.com/api/webhooks/112233445566778899/Xy_9-abcDEF123ghiJKL456mnoPQR789stu?wait=true",
			"https://discord.com/api/webhooks/112233445566778899/Xy_9-a…(35 chars)?wait=true"},
		// A token-like query value, whatever its name.
		{"https://fn.azurewebsites.net/api/hook?code=aB3dE5fG7hJ9kL1mN3pQ5rS7&clientId=default",
			"https://fn.azurewebsites.net/api/hook?code=****&clientId=default"},
		// Words, hyphenated names, short IDs and digits alone are shown.
		{"https://h/api/v1/billing-webhook-receiver/12345678901234567890/ab12",
			"https://h/api/v1/billing-webhook-receiver/12345678901234567890/ab12"},
		{"https://h/p/aB3dE5fG7hJ9kL1mN3pQ5rS7?token=x#frag/aB3dE5fG7hJ9kL1mN3pQ5rS7",
			"https://h/p/aB3dE5…(24 chars)?token=****#frag/aB3dE5fG7hJ9kL1mN3pQ5rS7"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := maskURL(tt.in); got != tt.want {
			t.Errorf("maskURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestSecretName(t *testing.T) {
	for name, want := range map[string]bool{
		"Authorization": true, "proxy-authorization": true, "COOKIE": true,
		"X-Api-Key": true, "X-Auth-Token": true, "Client-Secret": true, "X-Password": true,
		"X-Team": false, "Content-Type": false, "X-Authorization-Hint": false, "Set-Cookie": false,
	} {
		if got := secretName(name); got != want {
			t.Errorf("secretName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestMarshalYAML(t *testing.T) {
	c := maskTestConfig(t)
	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{
		"listen: 127.0.0.1:8080\n", "shutdown_timeout: 20s\n", "duplicate_window: 20s\n",
		"schedule: [1m, 5m, 30m, 1h, 2h, 4h, 8h, 12h, 12h, 12h, 12h, 12h]\n",
		"X-Team: billing\n", "events: []\n", "headers: {}\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "hmac:") {
		t.Errorf("output has the unused hmac mappings:\n%s", s)
	}
	if !strings.HasPrefix(s, "listen:") || !strings.Contains(s, "\ndata_dir:") {
		t.Errorf("keys not in field order:\n%s", s)
	}
	back := marshalRoundTrip(t, c)
	if !reflect.DeepEqual(back.Routes[0].Schedule, c.Routes[0].Schedule) || back.NATS != c.NATS || back.Sources[0].Secrets[0] != "whsec_…(29 chars)" {
		t.Errorf("round trip changed values")
	}
}

// The example with every key set survives a round trip too.
func TestMarshalYAMLFullExample(t *testing.T) {
	data, err := os.ReadFile("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(data, func(name string) (string, bool) { return name + "_value_0123456789", true })
	if err != nil {
		t.Fatal(err)
	}
	marshalRoundTrip(t, c)
}

// marshalRoundTrip checks that yaml.Marshal(c) reads back, key for key,
// to c with its secrets masked (compared through a second yaml.Marshal),
// and returns what it read. It leaves in c what c's secrets print as.
func marshalRoundTrip(t *testing.T, c *Config) *Config {
	t.Helper()
	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var back Config
	dec := yaml.NewDecoder(bytes.NewReader(out))
	dec.KnownFields(true)
	if err := dec.Decode(&back); err != nil {
		t.Fatalf("decoding the output: %v\n%s", err, out)
	}
	maskValues(reflect.ValueOf(c).Elem())
	want, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	again, err := yaml.Marshal(&back)
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(want) {
		t.Errorf("round trip differs:\n%s\nthen\n%s", want, again)
	}
	return &back
}

// maskValues replaces each Secret, URL and Headers under v by what it
// prints as.
func maskValues(v reflect.Value) {
	switch x := v.Interface().(type) {
	case Secret:
		v.Set(reflect.ValueOf(Secret(x.String())))
		return
	case URL:
		v.Set(reflect.ValueOf(URL(x.String())))
		return
	case Headers:
		v.Set(reflect.ValueOf(Headers(x.masked())))
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			maskValues(v.Field(i))
		}
	case reflect.Slice:
		for i := range v.Len() {
			maskValues(v.Index(i))
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", time.Second: "1s", 5 * time.Minute: "5m", 90 * time.Minute: "1h30m",
		2 * time.Hour: "2h", 100 * time.Millisecond: "100ms", time.Hour + time.Second: "1h0m1s",
		90 * time.Second: "1m30s", 1500 * time.Millisecond: "1.5s", -5 * time.Minute: "-5m",
	} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
		if back, err := time.ParseDuration(want); err != nil || back != d {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", want, back, err, d)
		}
	}
}
