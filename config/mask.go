package config

import (
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Masked returns a deep copy of c with every secret replaced by a short
// hint (see MaskSecret), for showing a configuration to people: `gateway
// check-config` prints it. c itself is not changed and shares no slice or
// map with the copy. Masked are:
//
//   - sources[].secrets[], api.tokens[] and routes[].secret;
//   - routes[].headers values whose name is Authorization,
//     Proxy-Authorization or Cookie, or contains "token", "secret", "key"
//     or "password" (case-insensitive);
//   - the password in the userinfo of nats.url (each URL of a cluster list)
//     and routes[].url, and a NATS userinfo without password (nats://TOKEN@host,
//     a token); query values of routes[].url whose name matches the header
//     rule above (?token=..., ?api_key=...) or whose value looks like a
//     token (see tokenLike; Azure's ?code=...);
//   - segments of a routes[].url path that look like tokens (see
//     tokenLike), as in Slack's and Discord's webhook URLs.
func (c *Config) Masked() *Config {
	if c == nil {
		return nil
	}
	m := deepCopy(reflect.ValueOf(c).Elem()).Addr().Interface().(*Config)

	m.NATS.URL = maskNATSURL(m.NATS.URL)
	for i := range m.Sources {
		maskAll(m.Sources[i].Secrets)
	}
	maskAll(m.API.Tokens)
	maskAll(m.Tasks.Tokens)
	m.Tasks.Secret = MaskSecret(m.Tasks.Secret)
	m.Metrics.Token = MaskSecret(m.Metrics.Token)
	for i := range m.Routes {
		r := &m.Routes[i]
		r.Secret = MaskSecret(r.Secret)
		r.URL = maskURL(r.URL, false)
		for name, v := range r.Headers {
			if secretName(name) {
				r.Headers[name] = MaskSecret(v)
			}
		}
	}
	return m
}

// MaskSecret returns a hint of secret s that does not give it away: ""
// for "", "****" for a secret shorter than 12 characters, otherwise its
// first characters (a quarter of it, at most 6) and its length, such as
// "whsec_…(32 chars)".
func MaskSecret(s string) string {
	n := utf8.RuneCountInString(s)
	switch {
	case n == 0:
		return ""
	case n < 12:
		return "****"
	}
	show := min(6, n/4)
	prefix := s
	for i := range s {
		if show == 0 {
			prefix = s[:i]
			break
		}
		show--
	}
	return prefix + "…(" + strconv.Itoa(n) + " chars)"
}

func maskAll(ss []string) {
	for i, s := range ss {
		ss[i] = MaskSecret(s)
	}
}

// secretName reports whether a header (or URL query parameter) named name
// carries a credential.
func secretName(name string) bool {
	n := strings.ToLower(name)
	switch n {
	case "authorization", "proxy-authorization", "cookie":
		return true
	}
	for _, word := range []string{"token", "secret", "key", "password"} {
		if strings.Contains(n, word) {
			return true
		}
	}
	return false
}

// maskNATSURL masks each URL of a comma-separated NATS server list.
func maskNATSURL(s string) string {
	if s == "" {
		return s
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = maskURL(p, true)
	}
	return strings.Join(parts, ",")
}

// maskURL replaces the password of raw's userinfo (and the user too when
// userIsToken and there is no password: NATS reads nats://TOKEN@host as a
// token) and the values of query parameters with a secretName by "****",
// and path segments that look like tokens by their MaskSecret hint.
// It edits the text rather than parse and re-encode, so the rest of the URL
// stays as written, even when it is not a valid URL.
func maskURL(raw string, userIsToken bool) string {
	scheme, rest := "", raw
	if i := strings.Index(raw, "://"); i >= 0 {
		scheme, rest = raw[:i+3], raw[i+3:]
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		userinfo, host := authority[:at], authority[at+1:]
		if user, pass, ok := strings.Cut(userinfo, ":"); ok && pass != "" {
			userinfo = user + ":****"
		} else if !ok && userIsToken && userinfo != "" {
			userinfo = "****"
		}
		authority = userinfo + "@" + host
	}
	return scheme + authority + maskQuery(maskPath(tail))
}

// maskPath masks the path segments of tail (the part of a URL from its
// path on) that look like tokens.
func maskPath(tail string) string {
	end := strings.IndexAny(tail, "?#")
	if end < 0 {
		end = len(tail)
	}
	segs := strings.Split(tail[:end], "/")
	for i, seg := range segs {
		if tokenLike(seg) {
			segs[i] = MaskSecret(seg)
		}
	}
	return strings.Join(segs, "/") + tail[end:]
}

// tokenLike reports whether a path segment looks like a generated secret:
// at least 16 characters, mixing at least two of lower case, upper case
// and digits. Slack's and Discord's webhook tokens do; words and
// hyphenated names do not. A long mixed-case name is masked too, which
// costs a reader less than a token shown.
func tokenLike(seg string) bool {
	if len(seg) < 16 {
		return false
	}
	var lower, upper, digit bool
	for _, c := range seg {
		switch {
		case 'a' <= c && c <= 'z':
			lower = true
		case 'A' <= c && c <= 'Z':
			upper = true
		case '0' <= c && c <= '9':
			digit = true
		}
	}
	n := 0
	for _, has := range []bool{lower, upper, digit} {
		if has {
			n++
		}
	}
	return n >= 2
}

// maskQuery masks the secret query values in tail, the part of a URL from
// its path on: those of a secret name, and those that look like tokens.
func maskQuery(tail string) string {
	q := strings.IndexByte(tail, '?')
	if q < 0 {
		return tail
	}
	query, frag := tail[q+1:], ""
	if f := strings.IndexByte(query, '#'); f >= 0 {
		query, frag = query[:f], query[f:]
	}
	params := strings.Split(query, "&")
	for i, p := range params {
		name, val, ok := strings.Cut(p, "=")
		if !ok || val == "" {
			continue
		}
		if n, err := url.QueryUnescape(name); err == nil {
			name = n
		}
		if secretName(name) || tokenLike(val) {
			params[i] = p[:len(p)-len(val)] + "****"
		}
	}
	return tail[:q+1] + strings.Join(params, "&") + frag
}

// deepCopy returns an addressable copy of v that shares no pointer, slice
// or map with it. It works on any type, so fields added to Config later are
// copied too.
func deepCopy(v reflect.Value) reflect.Value {
	out := reflect.New(v.Type()).Elem()
	copyInto(out, v)
	return out
}

func copyInto(dst, src reflect.Value) {
	switch src.Kind() {
	case reflect.Struct:
		dst.Set(src) // unexported fields too, shallowly
		for i := 0; i < src.NumField(); i++ {
			if dst.Field(i).CanSet() {
				copyInto(dst.Field(i), src.Field(i))
			}
		}
	case reflect.Array:
		for i := 0; i < src.Len(); i++ {
			copyInto(dst.Index(i), src.Index(i))
		}
	case reflect.Slice:
		if src.IsNil() {
			dst.SetZero()
			return
		}
		s := reflect.MakeSlice(src.Type(), src.Len(), src.Len())
		for i := 0; i < src.Len(); i++ {
			copyInto(s.Index(i), src.Index(i))
		}
		dst.Set(s)
	case reflect.Map:
		if src.IsNil() {
			dst.SetZero()
			return
		}
		m := reflect.MakeMapWithSize(src.Type(), src.Len())
		for it := src.MapRange(); it.Next(); {
			k, v := deepCopy(it.Key()), deepCopy(it.Value())
			m.SetMapIndex(k, v)
		}
		dst.Set(m)
	case reflect.Pointer:
		if src.IsNil() {
			dst.SetZero()
			return
		}
		p := reflect.New(src.Type().Elem())
		copyInto(p.Elem(), src.Elem())
		dst.Set(p)
	default:
		dst.Set(src)
	}
}
