package egress

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// addr parses s; "" is the invalid (zero) address.
func addr(t testing.TB, s string) netip.Addr {
	t.Helper()
	if s == "" {
		return netip.Addr{}
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatalf("bad test address %q: %v", s, err)
	}
	return a
}

// TestAllowedClasses checks every refused address class with the zero
// Policy (no allow entries), in IPv4, IPv6 and embedded forms.
func TestAllowedClasses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr  string
		class string // "" means allowed
	}{
		// Public.
		{"93.184.216.34", ""},
		{"8.8.8.8", ""},
		{"1.1.1.1", ""},
		{"172.32.0.1", ""},
		{"172.15.255.255", ""},
		{"100.128.0.1", ""},
		{"100.63.255.255", ""},
		{"192.169.0.1", ""},
		{"198.20.0.1", ""},
		{"223.255.255.255", ""},
		{"2606:2800:220:1:248:1893:25c8:1946", ""},
		{"2a00:1450:4001::1", ""},
		{"2001:4860:4860::8888", ""},

		// Loopback.
		{"127.0.0.1", "loopback"},
		{"127.1.2.3", "loopback"},
		{"127.255.255.254", "loopback"},
		{"::1", "loopback"},
		// Private (RFC 1918).
		{"10.0.0.1", "private"},
		{"10.1.2.3", "private"},
		{"10.255.255.255", "private"},
		{"172.16.0.1", "private"},
		{"172.31.255.255", "private"},
		{"192.168.0.1", "private"},
		{"192.168.255.255", "private"},
		// Unique local.
		{"fc00::1", "unique local"},
		{"fd12:3456:789a::1", "unique local"},
		{"fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "unique local"},
		// Link-local and cloud metadata.
		{"169.254.0.1", "link-local"},
		{"169.254.255.255", "link-local"},
		{"169.254.169.254", "cloud metadata (link-local)"},
		{"fe80::1", "link-local"},
		{"febf:ffff::1", "link-local"},
		{"fd00:ec2::254", "cloud metadata (unique local)"},
		{"fd00:ec2::253", "unique local"},
		// CGNAT.
		{"100.64.0.1", "shared address space (CGNAT)"},
		{"100.100.100.200", "shared address space (CGNAT)"},
		{"100.127.255.255", "shared address space (CGNAT)"},
		// Multicast.
		{"224.0.0.1", "multicast"},
		{"239.255.255.250", "multicast"},
		{"ff02::1", "multicast"},
		{"ff05::1:3", "multicast"},
		// Unspecified, "this network", broadcast, reserved.
		{"0.0.0.0", "unspecified"},
		{"::", "unspecified"},
		{"0.0.0.1", `"this network" (0.0.0.0/8)`},
		{"0.255.255.255", `"this network" (0.0.0.0/8)`},
		{"255.255.255.255", "broadcast"},
		{"240.0.0.1", "reserved"},
		{"255.255.255.254", "reserved"},
		// Benchmarking.
		{"198.18.0.1", "benchmarking"},
		{"198.19.255.255", "benchmarking"},
		{"2001:2::1", "benchmarking"},
		// Documentation.
		{"192.0.2.1", "documentation"},
		{"198.51.100.7", "documentation"},
		{"203.0.113.255", "documentation"},
		{"2001:db8::1", "documentation"},
		{"3fff::1", "documentation"},
		// Other special ranges.
		{"192.0.0.1", "IETF protocol assignment"},
		{"192.0.0.192", "IETF protocol assignment"},
		{"192.88.99.1", "6to4 relay anycast"},
		{"fec0::1", "site-local"},
		{"100::1", "discard-only"},
		{"2001:10::1", "IETF protocol assignment"},
		{"4000::1", "reserved"},
		{"::ffff:0:7f00:1", "reserved"}, // SIIT "IPv4-translated", not routable
		{"5f00::1", "reserved"},

		// IPv4-mapped.
		{"::ffff:127.0.0.1", "loopback (IPv4-mapped 127.0.0.1)"},
		{"::ffff:7f00:1", "loopback (IPv4-mapped 127.0.0.1)"},
		{"::ffff:10.1.2.3", "private (IPv4-mapped 10.1.2.3)"},
		{"::ffff:169.254.169.254", "cloud metadata (link-local) (IPv4-mapped 169.254.169.254)"},
		{"::ffff:0.0.0.0", "unspecified (IPv4-mapped 0.0.0.0)"},
		{"::ffff:93.184.216.34", ""},
		// IPv4-compatible.
		{"::127.0.0.1", "loopback (IPv4-compatible 127.0.0.1)"},
		{"::10.1.2.3", "private (IPv4-compatible 10.1.2.3)"},
		{"::0.0.0.2", `"this network" (0.0.0.0/8) (IPv4-compatible 0.0.0.2)`},
		{"::93.184.216.34", ""},
		// NAT64 (RFC 6052 well-known prefix).
		{"64:ff9b::7f00:1", "loopback (NAT64 127.0.0.1)"},
		{"64:ff9b::10.1.2.3", "private (NAT64 10.1.2.3)"},
		{"64:ff9b::192.168.1.1", "private (NAT64 192.168.1.1)"},
		{"64:ff9b::169.254.169.254", "cloud metadata (link-local) (NAT64 169.254.169.254)"},
		{"64:ff9b::93.184.216.34", ""},
		// Local-use NAT64 (RFC 8215): refused outright.
		{"64:ff9b:1::a01:203", "local-use NAT64"},
		{"64:ff9b:1::5db8:d822", "local-use NAT64"},
		// 6to4.
		{"2002:7f00:1::1", "loopback (6to4 127.0.0.1)"},
		{"2002:a01:203::1", "private (6to4 10.1.2.3)"},
		{"2002:c0a8:101::", "private (6to4 192.168.1.1)"},
		{"2002:a9fe:a9fe::1", "cloud metadata (link-local) (6to4 169.254.169.254)"},
		{"2002:5db8:d822::1", ""},
		// Teredo: refused outright, whatever it embeds.
		{"2001::1", "Teredo"},
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"},
		// Zones and invalid addresses.
		{"fe80::1%eth0", "zoned (scoped to a local interface)"},
		{"2606:2800:220:1:248:1893:25c8:1946%eth0", "zoned (scoped to a local interface)"},
		{"", "invalid"},
	}
	var p Policy // the zero value
	for _, tc := range tests {
		t.Run(tc.addr, func(t *testing.T) {
			gotOK, gotClass := p.Allowed("", addr(t, tc.addr))
			if wantOK := tc.class == ""; gotOK != wantOK || gotClass != tc.class {
				t.Errorf("Allowed(%q) = %v, %q; want %v, %q", tc.addr, gotOK, gotClass, wantOK, tc.class)
			}
			// A host name without allow entry changes nothing.
			if ok2, class2 := p.Allowed("some.example", addr(t, tc.addr)); ok2 != gotOK || class2 != gotClass {
				t.Errorf("Allowed(some.example, %q) = %v, %q; want %v, %q", tc.addr, ok2, class2, gotOK, gotClass)
			}
		})
	}
}

func TestAllowedEntries(t *testing.T) {
	t.Parallel()
	p, err := New([]string{
		"hooks.internal",
		"*.svc.cluster.local",
		"10.1.2.3",
		"172.20.0.0/16",
		"fd00:1::/32",
		"Upper.Example.",
		"::ffff:192.168.5.0/120",
		"::ffff:192.168.9.9",
		"fe80::/10",
		"localhost",
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		host, addr string
		class      string // "" means allowed
	}{
		// Host names: exact, case-insensitive, trailing dot ignored; every
		// address of an allowed name is allowed.
		{"hooks.internal", "10.9.9.9", ""},
		{"HOOKS.Internal.", "127.0.0.1", ""},
		{"hooks.internal", "169.254.169.254", ""},
		{"other.internal", "10.9.9.9", "private"},
		{"x.hooks.internal", "10.9.9.9", "private"},
		{"upper.example", "192.168.1.1", ""},
		// Wildcards match subdomains at any depth, not the name itself.
		{"a.svc.cluster.local", "10.0.0.5", ""},
		{"a.b.svc.cluster.local", "10.0.0.5", ""},
		{"A.SVC.cluster.local.", "10.0.0.5", ""},
		{"svc.cluster.local", "10.0.0.5", "private"},
		{"evilsvc.cluster.local", "10.0.0.5", "private"},
		{"svc.cluster.local.evil.test", "10.0.0.5", "private"},
		// IPs and CIDRs, also embedded in IPv6 forms.
		{"", "10.1.2.3", ""},
		{"", "10.1.2.4", "private"},
		{"any.example", "10.1.2.3", ""},
		{"", "::ffff:10.1.2.3", ""},
		{"", "64:ff9b::10.1.2.3", ""},
		{"", "2002:a01:203::1", ""},
		{"", "172.20.3.4", ""},
		{"", "172.21.0.1", "private"},
		{"", "fd00:1::5", ""},
		{"", "fd00:2::5", "unique local"},
		{"", "192.168.5.7", ""}, // from the IPv4-mapped CIDR
		{"", "192.168.6.1", "private"},
		{"", "192.168.9.9", ""}, // from the IPv4-mapped IP
		{"", "fe80::1", ""},
		{"", "fe80::1%eth0", "zoned (scoped to a local interface)"},
		{"hooks.internal", "fe80::1%eth0", "zoned (scoped to a local interface)"},
		{"hooks.internal", "", "invalid"},
		// localhost names: refused by name unless allowed by name.
		{"localhost", "127.0.0.1", ""},
		{"a.localhost", "127.0.0.1", "a loopback name"},
		{"a.localhost", "93.184.216.34", "a loopback name"},
	}
	for _, tc := range tests {
		t.Run(tc.host+"/"+tc.addr, func(t *testing.T) {
			gotOK, gotClass := p.Allowed(tc.host, addr(t, tc.addr))
			if wantOK := tc.class == ""; gotOK != wantOK || gotClass != tc.class {
				t.Errorf("Allowed(%q, %q) = %v, %q; want %v, %q", tc.host, tc.addr, gotOK, gotClass, wantOK, tc.class)
			}
		})
	}

	var zero Policy
	for _, host := range []string{"localhost", "LocalHost.", "foo.localhost"} {
		if ok, class := zero.Allowed(host, addr(t, "93.184.216.34")); ok || class != "a loopback name" {
			t.Errorf("zero.Allowed(%q, public) = %v, %q; want false, %q", host, ok, class, "a loopback name")
		}
	}
}

func TestNewGoodEntries(t *testing.T) {
	t.Parallel()
	for _, entry := range []string{
		"example.com", "EXAMPLE.com.", "*.example.com", "a-b_c.example", "xn--bcher-kva.de",
		"127.0.0.1", "::1", "fd00::1", "::ffff:10.0.0.1",
		"10.0.0.0/8", "0.0.0.0/0", "::/0", "fd00::/8", "192.168.1.1/32",
		"localhost", "1.2.3.example",
	} {
		if _, err := New([]string{entry}); err != nil {
			t.Errorf("New(%q): %v", entry, err)
		}
	}
}

func TestNewBadEntries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		entry string
		want  string // reason
	}{
		{"10.0.0.0/33", `"10.0.0.0/33" is not a host, IP or CIDR`},
		{"", `"" is not a host, IP or CIDR`},
		{"10.1.2.3/8", `"10.1.2.3/8" has bits set beyond the prefix length (did you mean 10.0.0.0/8?)`},
		{"fe80::1%eth0", `"fe80::1%eth0" has an IPv6 zone; zones cannot be allowed`},
		{"fe80::1%eth0/64", `"fe80::1%eth0/64" is not a host, IP or CIDR`},
		{"10.0.0.0/", `"10.0.0.0/" is not a host, IP or CIDR`},
		{"example.com/24", `"example.com/24" is not a host, IP or CIDR`},
		{"http://example.com", `"http://example.com" is not a host, IP or CIDR`},
		{"example.com:8080", `"example.com:8080" is not a host, IP or CIDR`},
		{"[::1]", `"[::1]" is not a host, IP or CIDR`},
		{"*", `"*" is not a host, IP or CIDR`},
		{"*.", `"*." is not a host, IP or CIDR`},
		{"*.*.example.com", `"*.*.example.com" is not a host, IP or CIDR`},
		{"a.*.example.com", `"a.*.example.com" is not a host, IP or CIDR`},
		{"a..example.com", `"a..example.com" is not a host, IP or CIDR`},
		{" example.com", `" example.com" is not a host, IP or CIDR`},
		{"bücher.de", `"bücher.de" is not a host, IP or CIDR`},
		{strings.Repeat("a", 64) + ".example", `"` + strings.Repeat("a", 64) + `.example" is not a host, IP or CIDR`},
		{"2130706433", `"2130706433" is not a host, IP or CIDR`},
		{"0x7f.1", `"0x7f.1" is not a host, IP or CIDR`},
		{"010.0.0.1", `"010.0.0.1" is not a host, IP or CIDR`},
		{"*.10.0.0.1", `"*.10.0.0.1" is not a host, IP or CIDR`},
	}
	for _, tc := range tests {
		t.Run(tc.entry, func(t *testing.T) {
			p, err := New([]string{"ok.example", tc.entry})
			var ee *EntryError
			if p != nil || !errors.As(err, &ee) {
				t.Fatalf("New(%q) = %v, %v; want nil, *EntryError", tc.entry, p, err)
			}
			if ee.Index != 1 || ee.Entry != tc.entry || ee.Reason != tc.want {
				t.Errorf("got %+v; want Index 1, Entry %q, Reason %q", *ee, tc.entry, tc.want)
			}
			if got, want := err.Error(), "allow[1]: "+tc.want; got != want {
				t.Errorf("error %q; want %q", got, want)
			}
		})
	}

	// The documented example, and several bad entries reported together.
	_, err := New([]string{"a.example", "10.0.0.0/8", "10.0.0.0/33"})
	if got, want := err.Error(), `allow[2]: "10.0.0.0/33" is not a host, IP or CIDR`; got != want {
		t.Errorf("error %q; want %q", got, want)
	}
	_, err = New([]string{"bad entry", "ok.example", "10.0.0.0/33"})
	want := "allow[0]: \"bad entry\" is not a host, IP or CIDR\nallow[2]: \"10.0.0.0/33\" is not a host, IP or CIDR"
	if err == nil || err.Error() != want {
		t.Errorf("error %v; want %q", err, want)
	}
}

func TestParseNumericIPv4(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want string // "" means not an IPv4 number
	}{
		{"127.0.0.1", "127.0.0.1"},
		{"2130706433", "127.0.0.1"},
		{"017700000001", "127.0.0.1"},
		{"0x7f000001", "127.0.0.1"},
		{"0x7f.1", "127.0.0.1"},
		{"127.1", "127.0.0.1"},
		{"127.0.1", "127.0.0.1"},
		{"0177.0.0.1", "127.0.0.1"},
		{"0x7F.0X0.0.01", "127.0.0.1"},
		{"127.000.000.001", "127.0.0.1"},
		{"0", "0.0.0.0"},
		{"0x", "0.0.0.0"},
		{"4294967295", "255.255.255.255"},
		{"10.16777215", "10.255.255.255"},
		{"4294967296", ""},
		{"256.0.0.1", ""},
		{"1.2.3.256", ""},
		{"10.16777216", ""},
		{"1.2.3.4.5", ""},
		{"08", ""},
		{"0x1g", ""},
		{"1..2", ""},
		{"", ""},
		{"+1", ""},
		{"-1", ""},
		{"1_000", ""},
	}
	for _, tc := range tests {
		got, ok := parseNumericIPv4(tc.in)
		if tc.want == "" {
			if ok {
				t.Errorf("parseNumericIPv4(%q) = %v; want failure", tc.in, got)
			}
			continue
		}
		if !ok || got.String() != tc.want {
			t.Errorf("parseNumericIPv4(%q) = %v, %v; want %s", tc.in, got, ok, tc.want)
		}
	}
}
