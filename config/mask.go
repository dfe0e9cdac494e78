package config

import (
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"
)

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

// maskURL replaces the password of raw's userinfo (and the user too when
// there is no password: NATS reads nats://TOKEN@host as a token, and a
// proxy may take an API key so) and the values of query parameters with a secretName by "****",
// and path segments that look like tokens by their MaskSecret hint.
// It edits the text rather than parse and re-encode, so the rest of the URL
// stays as written, even when it is not a valid URL.
func maskURL(raw string) string {
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
		} else if !ok && userinfo != "" {
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
