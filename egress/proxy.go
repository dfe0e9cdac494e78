package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
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

// UseProxy sends t's requests through the forward proxy u. An https://
// proxy is spoken to in HTTP/1.1 only: net/http writes its CONNECT as
// HTTP/1.1, which a proxy that negotiated h2 with it (t attempts HTTP/2)
// cannot read. The TLS inside the tunnel, to the target, still may.
func UseProxy(t *http.Transport, u *url.URL) {
	t.Proxy = http.ProxyURL(u)
	if u.Scheme != "https" {
		return
	}
	dial := t.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: dialTimeout, KeepAlive: keepAlive}).DialContext
	}
	base, timeout := t.TLSClientConfig, t.TLSHandshakeTimeout
	// With a proxy, net/http's only TLS dial of its own is to the proxy.
	t.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if base != nil {
			cfg = base.Clone()
		}
		cfg.NextProtos = []string{"http/1.1"}
		cfg.ServerName = u.Hostname()
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = conn.Close() // the handshake's error is the one to report
			return nil, err
		}
		return tc, nil
	}
}
