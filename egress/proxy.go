package egress

import (
	"errors"
	"net/url"
)

// ParseProxy parses the forward proxy that routes' or tasks' requests go
// through: http://, https://, socks5:// or socks5h://, with a host, and
// userinfo for its credentials. An error never quotes the URL: it may
// hold a password.
func ParseProxy(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, errors.New("not a valid URL")
	}
	switch u.Scheme {
	case "http", "https", "socks5", "socks5h":
	default:
		return nil, errors.New("scheme must be http, https, socks5 or socks5h")
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, errors.New("missing host")
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, errors.New("a proxy URL has no path, query or fragment")
	}
	return u, nil
}
