// Package egress decides which network destinations outbound requests to
// caller-supplied URLs (tasks) may reach, and enforces it when dialing, so
// DNS rebinding cannot bypass the check.
//
// A Policy is used twice for every task:
//
//   - at submit time, CheckURL validates the URL and resolves its host, so an
//     API can refuse a task aimed at a private address with a clear message
//     (a failed lookup is neither ErrBadURL nor ErrNotAllowed: the task API
//     queues such a task and leaves it to the dial-time check);
//   - at delivery time, the Policy's Transport (DialContext) resolves the host
//     again, checks every address and connects to a checked IP only, never
//     to the name. A host that answered a public address at submit time and
//     127.0.0.1 at delivery time is therefore refused at delivery time.
//
// With a forward proxy (tasks.proxy, ProxyTransport) every connection goes
// to the proxy, so only the submit-time check is the gateway's; the proxy
// judges what it connects to.
//
// Refused address classes (each can be opened by an allow entry):
//
//	IPv4: 0.0.0.0 (unspecified), 0.0.0.0/8 ("this network"), 10/8,
//	      172.16/12, 192.168/16 (private), 100.64/10 (CGNAT), 127/8
//	      (loopback), 169.254/16 (link-local, including the cloud metadata
//	      address 169.254.169.254), 192.0.0/24 (IETF protocol assignments),
//	      192.0.2/24, 198.51.100/24, 203.0.113/24 (documentation),
//	      192.88.99/24 (6to4 relay anycast), 198.18/15 (benchmarking),
//	      224/4 (multicast), 240/4 (reserved), 255.255.255.255 (broadcast).
//	IPv6: :: (unspecified), ::1 (loopback), fc00::/7 (unique local,
//	      including the EC2 metadata address fd00:ec2::254), fe80::/10
//	      (link-local), fec0::/10 (site-local), ff00::/8 (multicast),
//	      100::/64 (discard-only), 2001::/32 (Teredo), 2001:2::/48
//	      (benchmarking), the rest of 2001::/23 (IETF protocol assignments),
//	      2001:db8::/32 and 3fff::/20 (documentation), 64:ff9b:1::/48
//	      (local-use NAT64), and everything outside 2000::/3 (global unicast)
//	      that is not one of the IPv4 embeddings below (reserved).
//
// Documentation ranges are refused: nothing legitimate lives there.
//
// IPv6 addresses that carry an IPv4 address are unwrapped and the IPv4
// address is judged by the IPv4 rules: IPv4-mapped ::ffff:a.b.c.d,
// IPv4-compatible ::a.b.c.d, NAT64 64:ff9b::/96 (RFC 6052) and 6to4
// 2002:AABB:CCDD::/48. Two embeddings are refused outright instead of being
// decoded: Teredo (2001::/32: the tunnel is obsolete and the client address
// is obfuscated, so no legitimate webhook target uses it) and local-use
// NAT64 (64:ff9b:1::/48, RFC 8215: the IPv4 position depends on a prefix
// length chosen by the local operator, so it cannot be decoded reliably).
//
// Addresses with an IPv6 zone (fe80::1%eth0) are always refused, whatever
// the allow entries say: a zone selects a local interface.
//
// Host names are refused before any lookup when they are "localhost" or end
// in ".localhost" (RFC 6761) and no allow entry matches the name, and when they end in a numeric label: such
// names ("2130706433", "0x7f.1", "017700000001", "127.1") are IPv4
// addresses in disguise for inet_aton(3) and browsers. They are decoded and
// refused with ErrNotAllowed when the address they denote is refused, and
// with ErrBadURL otherwise (write the address in dotted decimal).
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// ErrNotAllowed is returned (wrapped) when a destination is refused by the
// policy. The message names the address and its class, e.g.
// "destination not allowed: 10.1.2.3 is private".
var ErrNotAllowed = errors.New("destination not allowed")

// ErrBadURL is returned (wrapped) for a task URL that is malformed or not
// acceptable in shape: a scheme other than http or https, a missing or
// malformed host, credentials in the URL, a bad port.
var ErrBadURL = errors.New("bad URL")

// Resolver looks up the addresses of a host. net.DefaultResolver satisfies
// it; network is "ip", "ip4" or "ip6".
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Option configures New.
type Option func(*Policy)

// WithResolver makes the policy resolve host names with r instead of
// net.DefaultResolver. A nil r means net.DefaultResolver.
func WithResolver(r Resolver) Option {
	return func(p *Policy) { p.res = r }
}

// Policy is a destination policy. The zero value refuses every private or
// special address and allows public ones, resolving with
// net.DefaultResolver. A Policy is safe for concurrent use and must not be
// modified after New returns it.
type Policy struct {
	hosts    map[string]bool // exact host names, lower case, no trailing dot
	suffixes []string        // ".example.com" for "*.example.com"
	prefixes []netip.Prefix  // allowed IPs (as /32, /128) and CIDRs
	res      Resolver
}

// EntryError is the error New returns for a bad allow entry. Callers that
// report configuration paths can use Index and Reason, e.g. as
// fmt.Sprintf("tasks.allow[%d]: %s", e.Index, e.Reason).
type EntryError struct {
	Index  int    // position in the allow list
	Entry  string // the entry as given
	Reason string // e.g. `"10.0.0.0/33" is not a host, IP or CIDR`
}

func (e *EntryError) Error() string { return fmt.Sprintf("allow[%d]: %s", e.Index, e.Reason) }

// New builds a policy. Each allow entry is one of:
//
//   - a host name, matched exactly and case-insensitively ("hooks.internal");
//     every address it resolves to may be reached, even private ones;
//   - "*." followed by a host name: any subdomain of it, at any depth
//     ("*.svc.internal" matches "a.svc.internal" and "a.b.svc.internal" but
//     not "svc.internal" itself);
//   - an IP address ("10.1.2.3", "fd00::1") or a CIDR ("10.20.0.0/16") that
//     may be reached although private or special. A CIDR must not have bits
//     set beyond its prefix length. IPv6 zones are not accepted.
//
// An allowed address is also allowed inside an IPv4-mapped, IPv4-compatible,
// NAT64 or 6to4 IPv6 address. Every bad entry is reported, each as an
// *EntryError, joined with errors.Join.
func New(allow []string, opts ...Option) (*Policy, error) {
	p := &Policy{}
	for _, o := range opts {
		o(p)
	}
	var errs []error
	for i, entry := range allow {
		if reason := p.add(entry); reason != "" {
			errs = append(errs, &EntryError{Index: i, Entry: entry, Reason: fmt.Sprintf("%q %s", entry, reason)})
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// add adds one allow entry; it returns why the entry is bad, or "".
func (p *Policy) add(entry string) string {
	const notValid = "is not a host, IP or CIDR"
	if strings.Contains(entry, "/") {
		pfx, err := netip.ParsePrefix(entry)
		if err != nil {
			return notValid
		}
		if m := pfx.Masked(); m != pfx {
			return fmt.Sprintf("has bits set beyond the prefix length (did you mean %s?)", m)
		}
		if pfx.Addr().Is4In6() && pfx.Bits() >= 96 {
			pfx = netip.PrefixFrom(pfx.Addr().Unmap(), pfx.Bits()-96)
		}
		p.prefixes = append(p.prefixes, pfx)
		return ""
	}
	if a, err := netip.ParseAddr(entry); err == nil {
		if a.Zone() != "" {
			return "has an IPv6 zone; zones cannot be allowed"
		}
		a = a.Unmap()
		p.prefixes = append(p.prefixes, netip.PrefixFrom(a, a.BitLen()))
		return ""
	}
	name := normalizeHost(entry)
	wild := false
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		name, wild = rest, true
	}
	if !validHostname(name) || endsInNumber(name) {
		return notValid
	}
	if wild {
		p.suffixes = append(p.suffixes, "."+name)
		return ""
	}
	if p.hosts == nil {
		p.hosts = make(map[string]bool)
	}
	p.hosts[name] = true
	return ""
}

func (p *Policy) resolver() Resolver {
	if p.res == nil {
		return net.DefaultResolver
	}
	return p.res
}

// Allowed reports whether address a, reached under host name host ("" or
// an IP literal when there is no name), may be reached, and when not, the
// class that refuses it (e.g. "private", "loopback",
// "private (IPv4-mapped 10.1.2.3)").
//
// An allow entry matching host permits every address; an allow entry
// matching a (or the IPv4 address embedded in it) permits it. Invalid
// addresses and addresses with an IPv6 zone are always refused.
func (p *Policy) Allowed(host string, a netip.Addr) (ok bool, class string) {
	if !a.IsValid() {
		return false, "invalid"
	}
	if a.Zone() != "" {
		return false, "zoned (scoped to a local interface)"
	}
	name := normalizeHost(host)
	if p.hostAllowed(name) || p.addrAllowed(a) {
		return true, ""
	}
	if isLocalhostName(name) {
		return false, "a loopback name"
	}
	if class := classify(a); class != "" {
		return false, class
	}
	return true, ""
}

// hostAllowed reports whether a normalized host name matches an allow entry.
func (p *Policy) hostAllowed(name string) bool {
	if name == "" {
		return false
	}
	if p.hosts[name] {
		return true
	}
	for _, s := range p.suffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// addrAllowed reports whether a (zone-free) address, or the IPv4 address
// embedded in it, matches an allowed IP or CIDR.
func (p *Policy) addrAllowed(a netip.Addr) bool {
	if len(p.prefixes) == 0 {
		return false
	}
	v4, _, embedded := embeddedIPv4(a)
	for _, pfx := range p.prefixes {
		if pfx.Contains(a) || (embedded && pfx.Contains(v4)) {
			return true
		}
	}
	return false
}

// notAllowed builds the ErrNotAllowed error for address a of host. For a
// host name it names the class of the address, not the address: the text
// reaches the task client (the 422, its attempts), who must not learn what
// internal names resolve to.
func notAllowed(host string, a netip.Addr, class string) error {
	if host == "" || host == a.String() {
		return fmt.Errorf("%w: %s is %s", ErrNotAllowed, a, class)
	}
	if strings.HasPrefix(class, "a ") { // "a loopback name"
		return fmt.Errorf("%w: %s is %s", ErrNotAllowed, host, class)
	}
	class, _, _ = strings.Cut(class, " (") // "private (IPv4-mapped 10.1.2.3)"
	return fmt.Errorf("%w: %s resolves to an address that is %s", ErrNotAllowed, host, class)
}

// normalizeHost lower-cases a host name and removes one trailing dot.
func normalizeHost(host string) string {
	return strings.ToLower(strings.TrimSuffix(host, "."))
}

// isLocalhostName reports whether a normalized name is reserved for
// loopback by RFC 6761.
func isLocalhostName(name string) bool {
	return name == "localhost" || strings.HasSuffix(name, ".localhost")
}

// validHostname reports whether a normalized name is a syntactically valid
// ASCII host name: dot-separated labels of 1-63 letters, digits, '-' or '_',
// at most 253 characters. Internationalized names must be given in their
// ASCII (xn--) form.
func validHostname(name string) bool {
	if name == "" || len(name) > 253 {
		return false
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
