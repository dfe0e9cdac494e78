package egress

import (
	"net/netip"
	"strings"
	"testing"
)

// FuzzAllowed parses arbitrary strings as addresses and checks that Allowed
// does not panic, that an IPv4 address and its IPv4-mapped form get the same
// verdict, and that the zero Policy never allows an address the standard
// library knows to be loopback, private, link-local, multicast or
// unspecified (in any IPv4 embedding).
func FuzzAllowed(f *testing.F) {
	for _, s := range []string{
		"93.184.216.34", "127.0.0.1", "::ffff:10.1.2.3", "64:ff9b::a9fe:a9fe",
		"2002:c0a8:101::1", "fe80::1%eth0", "2001::1", "::0.0.0.2", "not an address",
	} {
		f.Add(s)
	}
	allow, err := New([]string{"10.1.0.0/16", "192.168.1.1", "fd00:1::/32", "::ffff:172.16.0.0/108"})
	if err != nil {
		f.Fatal(err)
	}
	policies := []*Policy{{}, allow}

	f.Fuzz(func(t *testing.T, s string) {
		parseNumericIPv4(s) // must not panic
		_ = endsInNumber(normalizeHost(s))
		a, err := netip.ParseAddr(s)
		if err != nil {
			a = netip.Addr{}
		}
		for i, p := range policies {
			ok, class := p.Allowed("", a)
			if ok != (class == "") {
				t.Fatalf("policy %d: Allowed(%s) = %v, %q: class must be empty exactly when allowed", i, a, ok, class)
			}
			var v4, mapped netip.Addr
			switch {
			case a.Is4():
				v4, mapped = a, netip.AddrFrom16(a.As16())
			case a.Is4In6() && a.Zone() == "":
				v4, mapped = a.Unmap(), a
			}
			if v4.IsValid() {
				ok4, class4 := p.Allowed("", v4)
				okm, classm := p.Allowed("", mapped)
				if ok4 != okm || !strings.HasPrefix(classm, class4) {
					t.Fatalf("policy %d: Allowed(%s) = %v, %q but Allowed(%s) = %v, %q", i, v4, ok4, class4, mapped, okm, classm)
				}
			}
		}

		ok, _ := policies[0].Allowed("", a)
		if !ok {
			return
		}
		check := []netip.Addr{a}
		if v4, _, embedded := embeddedIPv4(a); embedded {
			check = append(check, v4)
		}
		for _, c := range check {
			if c.IsLoopback() || c.IsPrivate() || c.IsLinkLocalUnicast() || c.IsLinkLocalMulticast() ||
				c.IsInterfaceLocalMulticast() || c.IsMulticast() || c.IsUnspecified() || c.Zone() != "" {
				t.Fatalf("zero Policy allows %s (%s is special)", a, c)
			}
		}
	})
}
