package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"syscall"
	"time"
	"unicode/utf8"
)

// Dial and transport timeouts.
const (
	dialTimeout         = 10 * time.Second // per address tried; the ctx deadline applies too
	keepAlive           = 30 * time.Second
	tlsHandshakeTimeout = 10 * time.Second
	idleConnTimeout     = 90 * time.Second
)

// CheckURL validates a task URL at submit time. The URL must be absolute
// with scheme http or https, have a host, carry no credentials (userinfo)
// and, if it has a port, a port in 1-65535; otherwise the error wraps
// ErrBadURL. The host is then resolved with the policy's resolver (unless it
// is an IP literal) and the URL is refused with an error wrapping
// ErrNotAllowed if any address is not allowed. A failed lookup returns the
// resolver's error, wrapped (neither ErrBadURL nor ErrNotAllowed): it may be
// temporary.
//
// Passing CheckURL does not make later requests safe by itself: deliver with
// Transport (or DialContext), which checks again at connection time.
func (p *Policy) CheckURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL itself is in the caller's hands already
		}
		return fmt.Errorf("%w: %w", ErrBadURL, err)
	}
	switch u.Scheme {
	case "http", "https":
	case "":
		return fmt.Errorf("%w: not an absolute URL (want http:// or https://)", ErrBadURL)
	default:
		return fmt.Errorf("%w: scheme %q not allowed (want http or https)", ErrBadURL, u.Scheme)
	}
	if u.Opaque != "" || u.Host == "" {
		return fmt.Errorf("%w: missing host", ErrBadURL)
	}
	if u.User != nil {
		return fmt.Errorf("%w: credentials (userinfo) in URLs are not accepted", ErrBadURL)
	}
	if port := u.Port(); port != "" {
		if _, err := parsePort(port); err != nil {
			return err
		}
	}
	_, _, err = p.destination(ctx, "ip", u.Hostname())
	return err
}

// DialContext dials network ("tcp", "tcp4" or "tcp6") address addr
// ("host:port") when the policy allows it. It resolves the host with the
// policy's resolver (an IP literal is used as it is), checks every address
// and refuses (ErrNotAllowed) if any is not allowed, so a name answering both
// public and private addresses is refused. It then connects to the checked
// addresses by IP, in order, until one connection succeeds; the name is
// never resolved again. Each attempt is bounded by ctx and by a 10 s dial
// timeout. As a second line of defence, the socket's address is checked
// again just before connecting.
//
// DialContext is meant as http.Transport.DialContext; see Transport.
func (p *Policy) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var ipNet string
	switch network {
	case "tcp":
		ipNet = "ip"
	case "tcp4":
		ipNet = "ip4"
	case "tcp6":
		ipNet = "ip6"
	default:
		return nil, fmt.Errorf("egress: dial %s %s: network not supported", network, addr)
	}
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: dial %s: %w", ErrBadURL, addr, err)
	}
	port, err := parsePort(portStr)
	if err != nil {
		return nil, err
	}
	name, addrs, err := p.destination(ctx, ipNet, host)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{
		Timeout:   dialTimeout,
		KeepAlive: keepAlive,
		ControlContext: func(_ context.Context, _, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("%w: cannot check dial address %q", ErrNotAllowed, address)
			}
			if ok, class := p.Allowed(name, ap.Addr()); !ok {
				return notAllowed(name, ap.Addr(), class)
			}
			return nil
		},
	}
	var errs []error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, network, netip.AddrPortFrom(a.Unmap(), port).String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// Transport returns an *http.Transport for delivering tasks: it dials with
// DialContext, never uses a proxy (environment proxies included: Proxy is
// nil), attempts HTTP/2, and bounds dialing (10 s per address), TLS
// handshakes (10 s) and idle connections (90 s). It sets no response
// timeout: bound each request with its context or http.Client.Timeout.
//
// Callers must not follow redirects blindly (a redirect to a private address
// is refused at dial time anyway, but the request fails late): set the
// client's CheckRedirect, e.g. to return http.ErrUseLastResponse.
func (p *Policy) Transport() *http.Transport {
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            p.DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           1024,
		MaxIdleConnsPerHost:    64, // above tasks.concurrency (default 16): fewer idle slots than attempts in flight churn connections
		IdleConnTimeout:        idleConnTimeout,
		TLSHandshakeTimeout:    tlsHandshakeTimeout,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 1 << 20,
	}
}

// ProxyTransport is Transport through the forward proxy u: every
// connection goes to the proxy, dialed as it is (the operator chose it).
// Before each request the task URL's host is resolved here and checked
// as at submission, so a name that did not resolve then is not sent
// unchecked; the proxy resolves it again, and must itself refuse what
// tasks must not reach (Smokescreen, for one, does).
func (p *Policy) ProxyTransport(u *url.URL) *http.Transport {
	t := p.Transport()
	t.DialContext = p.dialProxy
	UseProxy(t, u)
	t.Proxy = func(req *http.Request) (*url.URL, error) {
		if _, _, err := p.destination(req.Context(), "ip", req.URL.Hostname()); err != nil {
			return nil, err
		}
		return u, nil
	}
	return t
}

// dialProxy dials the forward proxy as it is, its name resolved by the
// policy's resolver if it is a *net.Resolver (else the default one). A
// name that does not resolve is answered without the DNS server's
// address (withoutServer): the text reaches the task client.
func (p *Policy) dialProxy(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout, KeepAlive: keepAlive}
	d.Resolver, _ = p.resolver().(*net.Resolver)
	c, err := d.DialContext(ctx, network, addr)
	if err == nil {
		return c, nil
	}
	var oe *net.OpError
	if !errors.As(err, &oe) {
		return nil, withoutServer(err)
	}
	op := *oe
	op.Err = withoutServer(oe.Err)
	return nil, &op
}

// destination checks host (from a URL or a dial address, without brackets)
// and resolves it on network ("ip", "ip4", "ip6"). It returns the
// normalized name ("" for an IP literal) and the addresses, every one of
// them allowed, or an error wrapping ErrBadURL or ErrNotAllowed, or the
// resolver's error.
func (p *Policy) destination(ctx context.Context, network, host string) (name string, addrs []netip.Addr, err error) {
	if host == "" {
		return "", nil, fmt.Errorf("%w: missing host", ErrBadURL)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if ok, class := p.Allowed("", a); !ok {
			return "", nil, notAllowed("", a, class)
		}
		return "", []netip.Addr{a}, nil
	}
	name = normalizeHost(host)
	if !isASCII(name) {
		return "", nil, fmt.Errorf("%w: host %q is not ASCII (write internationalized names in their xn-- form)", ErrBadURL, host)
	}
	if !validHostname(name) {
		return "", nil, fmt.Errorf("%w: invalid host %q", ErrBadURL, host)
	}
	if endsInNumber(name) {
		a, ok := parseNumericIPv4(name)
		if !ok {
			return "", nil, fmt.Errorf("%w: invalid numeric host %q", ErrBadURL, host)
		}
		if ok, class := p.Allowed("", a); !ok {
			return "", nil, fmt.Errorf("%w: %s (%s) is %s", ErrNotAllowed, a, host, class)
		}
		return "", nil, fmt.Errorf("%w: numeric host %q must be written as %s", ErrBadURL, host, a)
	}
	if !p.hostAllowed(name) && isLocalhostName(name) {
		return "", nil, fmt.Errorf("%w: %s is a loopback name", ErrNotAllowed, host)
	}
	addrs, err = p.resolver().LookupNetIP(ctx, network, host)
	if err != nil {
		return "", nil, fmt.Errorf("egress: resolving %s: %w", host, withoutServer(err))
	}
	if len(addrs) == 0 {
		return "", nil, fmt.Errorf("egress: resolving %s: no addresses", host)
	}
	for _, a := range addrs {
		if ok, class := p.Allowed(name, a); !ok {
			return "", nil, notAllowed(name, a, class)
		}
	}
	return name, addrs, nil
}

// withoutServer is a resolver's err without the address of the DNS
// server it names (*net.DNSError): the text reaches the task client, as
// notAllowed's does.
func withoutServer(err error) error {
	var de *net.DNSError
	if !errors.As(err, &de) || de.Server == "" {
		return err
	}
	c := *de
	c.Server = ""
	return &c
}

// parsePort parses a decimal port number in 1-65535.
func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%w: invalid port %q", ErrBadURL, s)
	}
	return uint16(n), nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
