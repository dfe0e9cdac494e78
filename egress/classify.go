package egress

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// special is a refused address range and its class name.
type special struct {
	prefix netip.Prefix
	class  string
}

func sp(cidr, class string) special { return special{netip.MustParsePrefix(cidr), class} }

// v4Special lists the refused IPv4 ranges; the first match wins, so more
// specific ranges come first.
var v4Special = []special{
	sp("169.254.169.254/32", "cloud metadata (link-local)"),
	sp("0.0.0.0/32", "unspecified"),
	sp("0.0.0.0/8", `"this network" (0.0.0.0/8)`),
	sp("10.0.0.0/8", "private"),
	sp("100.64.0.0/10", "shared address space (CGNAT)"),
	sp("127.0.0.0/8", "loopback"),
	sp("169.254.0.0/16", "link-local"),
	sp("172.16.0.0/12", "private"),
	sp("192.0.0.0/24", "IETF protocol assignment"),
	sp("192.0.2.0/24", "documentation"),
	sp("192.88.99.0/24", "6to4 relay anycast"),
	sp("192.168.0.0/16", "private"),
	sp("198.18.0.0/15", "benchmarking"),
	sp("198.51.100.0/24", "documentation"),
	sp("203.0.113.0/24", "documentation"),
	sp("224.0.0.0/4", "multicast"),
	sp("255.255.255.255/32", "broadcast"),
	sp("240.0.0.0/4", "reserved"),
}

// v6Special lists the refused IPv6 ranges checked after the IPv4
// embeddings; the first match wins.
var v6Special = []special{
	sp("100::/64", "discard-only"),
	sp("64:ff9b:1::/48", "local-use NAT64"),
	sp("2001::/32", "Teredo"),
	sp("2001:2::/48", "benchmarking"),
	sp("2001::/23", "IETF protocol assignment"),
	sp("2001:db8::/32", "documentation"),
	sp("3fff::/20", "documentation"),
	sp("fd00:ec2::254/128", "cloud metadata (unique local)"),
	sp("fc00::/7", "unique local"),
	sp("fe80::/10", "link-local"),
	sp("fec0::/10", "site-local"),
	sp("ff00::/8", "multicast"),
}

var (
	ipv4Compatible = netip.MustParsePrefix("::/96")
	nat64          = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour      = netip.MustParsePrefix("2002::/16")
	globalUnicast  = netip.MustParsePrefix("2000::/3")
)

// classify returns the class of a zone-free address when it is refused, or
// "" when it is public.
func classify(a netip.Addr) string {
	a = a.WithZone("")
	if a.Is4() {
		return match(v4Special, a)
	}
	switch a {
	case netip.IPv6Unspecified():
		return "unspecified"
	case netip.IPv6Loopback():
		return "loopback"
	}
	if v4, kind, ok := embeddedIPv4(a); ok {
		if class := match(v4Special, v4); class != "" {
			return fmt.Sprintf("%s (%s %s)", class, kind, v4)
		}
		return ""
	}
	if class := match(v6Special, a); class != "" {
		return class
	}
	if !globalUnicast.Contains(a) {
		return "reserved"
	}
	return ""
}

func match(list []special, a netip.Addr) string {
	for _, s := range list {
		if s.prefix.Contains(a) {
			return s.class
		}
	}
	return ""
}

// embeddedIPv4 returns the IPv4 address an IPv6 address carries, and the
// kind of embedding: IPv4-mapped (::ffff:0:0/96), IPv4-compatible (::/96,
// except :: and ::1), NAT64 (64:ff9b::/96) or 6to4 (2002::/16).
func embeddedIPv4(a netip.Addr) (v4 netip.Addr, kind string, ok bool) {
	if !a.Is6() {
		return netip.Addr{}, "", false
	}
	a = a.WithZone("")
	b := a.As16()
	switch {
	case a.Is4In6():
		return a.Unmap(), "IPv4-mapped", true
	case ipv4Compatible.Contains(a):
		if a == netip.IPv6Unspecified() || a == netip.IPv6Loopback() {
			return netip.Addr{}, "", false
		}
		return netip.AddrFrom4([4]byte(b[12:16])), "IPv4-compatible", true
	case nat64.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:16])), "NAT64", true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), "6to4", true
	}
	return netip.Addr{}, "", false
}

// endsInNumber reports whether the last label of a normalized host name is
// a number (decimal digits, or "0x" and hex digits): such a name is an IPv4
// address for the WHATWG URL standard and for inet_aton(3), never a DNS
// name.
func endsInNumber(name string) bool {
	last := name[strings.LastIndexByte(name, '.')+1:]
	if last == "" {
		return false
	}
	if h, ok := strings.CutPrefix(last, "0x"); ok {
		last = h
		if last == "" {
			return true
		}
		for i := 0; i < len(last); i++ {
			if !isHex(last[i]) {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(last); i++ {
		if last[i] < '0' || last[i] > '9' {
			return false
		}
	}
	return true
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// parseNumericIPv4 decodes the IPv4 forms inet_aton(3) and the WHATWG URL
// standard accept: 1 to 4 dot-separated numbers, each decimal, octal
// (leading 0) or hexadecimal (leading 0x); the last number fills the
// remaining bytes ("127.1" is 127.0.0.1, "2130706433" is 127.0.0.1).
func parseNumericIPv4(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var v uint64
	for i, part := range parts {
		n, ok := parseIPv4Number(part)
		if !ok {
			return netip.Addr{}, false
		}
		if i < len(parts)-1 {
			if n > 0xff {
				return netip.Addr{}, false
			}
			v |= n << (8 * (3 - i))
			continue
		}
		if n >= 1<<(8*(5-len(parts))) {
			return netip.Addr{}, false
		}
		v |= n
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

func parseIPv4Number(s string) (uint64, bool) {
	base := 10
	switch {
	case len(s) >= 2 && (s[:2] == "0x" || s[:2] == "0X"):
		s, base = s[2:], 16
		if s == "" {
			return 0, true
		}
	case len(s) >= 2 && s[0] == '0':
		s, base = s[1:], 8
	}
	if s == "" || s[0] == '+' || s[0] == '-' {
		return 0, false
	}
	n, err := strconv.ParseUint(s, base, 32)
	return n, err == nil
}
