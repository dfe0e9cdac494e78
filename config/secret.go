package config

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
)

// The types below hold configuration values that are or may carry
// credentials. Each masks itself wherever it is printed: YAML, JSON, fmt
// (every verb, %#v included) and slog show the masked form, so a Config
// can be logged or shown by `gateway check-config` as it is. The code that
// uses a credential asks for it by name: Secret.Reveal, Secrets.Reveal,
// URL.Reveal, or a Headers value read from the map.

// Secret is a credential: a signing secret or a bearer token. Printed, it
// is MaskSecret's hint, such as "whsec_…(32 chars)".
type Secret string

// Reveal returns the secret itself.
func (s Secret) Reveal() string { return string(s) }

// String returns the masked secret.
func (s Secret) String() string { return MaskSecret(string(s)) }

// The Format methods ignore Fprintf's error: a write to a fmt.State goes to
// fmt's buffer and cannot fail; the outer print reports its writer's error.

func (s Secret) GoString() string { return strconv.Quote(s.String()) }
func (s Secret) Format(f fmt.State, verb rune) {
	_, _ = fmt.Fprintf(f, fmt.FormatString(f, verb), s.String())
}
func (s Secret) MarshalYAML() (any, error)    { return s.String(), nil }
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }
func (s Secret) LogValue() slog.Value         { return slog.StringValue(s.String()) }

// Secrets is a list of secrets; each masks itself.
type Secrets []Secret

// Reveal returns the secrets themselves.
func (ss Secrets) Reveal() []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}

// URL is a URL that may carry credentials. Printed, it is masked by
// maskURL: the password of its userinfo, query values of a secret name or
// that look like tokens, and path segments that look like tokens (as in
// Slack's and Discord's webhook URLs). A value that is not an http(s) URL is
// read as nats.url is written: comma-separated server URLs, where a
// userinfo without password (nats://TOKEN@host) is a token and masked too.
type URL string

// Reveal returns the URL itself.
func (u URL) Reveal() string { return string(u) }

// String returns the masked URL.
func (u URL) String() string {
	s := string(u)
	if l := strings.ToLower(s); strings.HasPrefix(l, "http://") || strings.HasPrefix(l, "https://") {
		return maskURL(s)
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = maskURL(p)
	}
	return strings.Join(parts, ",")
}

func (u URL) GoString() string { return strconv.Quote(u.String()) }
func (u URL) Format(f fmt.State, verb rune) {
	_, _ = fmt.Fprintf(f, fmt.FormatString(f, verb), u.String())
}
func (u URL) MarshalYAML() (any, error)    { return u.String(), nil }
func (u URL) MarshalJSON() ([]byte, error) { return json.Marshal(u.String()) }
func (u URL) LogValue() slog.Value         { return slog.StringValue(u.String()) }

// Headers are HTTP request headers, name to value. Printed, the values of
// the headers that carry credentials are masked: Authorization,
// Proxy-Authorization, Cookie, and any name containing "token", "secret",
// "key" or "password" (case-insensitive).
type Headers map[string]string

// masked returns a copy of h with the credentials masked; nil for nil.
func (h Headers) masked() map[string]string {
	m := maps.Clone(h)
	for name, v := range m {
		if secretName(name) {
			m[name] = MaskSecret(v)
		}
	}
	return m
}

func (h Headers) String() string   { return fmt.Sprint(h.masked()) }
func (h Headers) GoString() string { return fmt.Sprintf("%#v", h.masked()) }
func (h Headers) Format(f fmt.State, verb rune) {
	_, _ = fmt.Fprintf(f, fmt.FormatString(f, verb), h.masked())
}
func (h Headers) MarshalYAML() (any, error)    { return h.masked(), nil }
func (h Headers) MarshalJSON() ([]byte, error) { return json.Marshal(h.masked()) }
func (h Headers) LogValue() slog.Value         { return slog.AnyValue(h.masked()) }
