package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
)

// fakeResolver answers from a table. Each name has a sequence of answers:
// the n-th lookup gets the n-th answer, the last one repeats.
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][][]netip.Addr
	calls   map[string]int
}

func newFakeResolver(t testing.TB, answers map[string][][]string) *fakeResolver {
	t.Helper()
	r := &fakeResolver{answers: map[string][][]netip.Addr{}, calls: map[string]int{}}
	for name, seq := range answers {
		for _, answer := range seq {
			var addrs []netip.Addr
			for _, s := range answer {
				addrs = append(addrs, addr(t, s))
			}
			r.answers[name] = append(r.answers[name], addrs)
		}
	}
	return r
}

func (r *fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	r.calls[name]++
	seq, ok := r.answers[name]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	answer := seq[min(r.calls[name], len(seq))-1]
	var out []netip.Addr
	for _, a := range answer {
		if network == "ip" || network == "ip4" && a.Unmap().Is4() || network == "ip6" && !a.Unmap().Is4() {
			out = append(out, a)
		}
	}
	return out, nil
}

func (r *fakeResolver) lookups(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[name]
}

// outcome of CheckURL.
const (
	pass   = "pass"
	bad    = "bad"    // errors.Is ErrBadURL
	denied = "denied" // errors.Is ErrNotAllowed
	other  = "other"  // neither (resolver failure)
)

func outcome(err error) string {
	switch {
	case err == nil:
		return pass
	case errors.Is(err, ErrBadURL) && errors.Is(err, ErrNotAllowed):
		return "both"
	case errors.Is(err, ErrBadURL):
		return bad
	case errors.Is(err, ErrNotAllowed):
		return denied
	}
	return other
}

func TestCheckURL(t *testing.T) {
	t.Parallel()
	r := newFakeResolver(t, map[string][][]string{
		"public.test":    {{"93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"}},
		"private.test":   {{"10.1.2.3"}},
		"mixed.test":     {{"93.184.216.34", "10.1.2.3"}},
		"mixed6.test":    {{"93.184.216.34", "fd00::1"}},
		"metadata.test":  {{"169.254.169.254"}},
		"v6local.test":   {{"fd00::1"}},
		"mapped.test":    {{"::ffff:127.0.0.1"}},
		"nat64.test":     {{"64:ff9b::a9fe:a9fe"}},
		"zoned.test":     {{"fe80::1%eth0"}},
		"hooks.internal": {{"10.1.2.3"}},
		"a.svc.internal": {{"192.168.1.10"}},
		// A lying resolver must not make localhost names reachable.
		"localhost":     {{"93.184.216.34"}},
		"foo.localhost": {{"93.184.216.34"}},
		"empty.test":    {{}},
	})
	p, err := New([]string{"hooks.internal", "*.svc.internal", "203.0.113.7"}, WithResolver(r))
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		url  string
		want string // outcome
		msg  string // exact error message, if set
	}{
		// Accepted.
		{"https://public.test/tasks", pass, ""},
		{"http://public.test:8080/x?y=1#frag", pass, ""},
		{"HTTPS://PUBLIC.test./", pass, ""},
		{"http://93.184.216.34/", pass, ""},
		{"http://[2606:2800:220:1:248:1893:25c8:1946]:443/", pass, ""},
		{"http://[::ffff:93.184.216.34]/", pass, ""},
		{"https://hooks.internal/run", pass, ""},
		{"https://a.svc.internal/run", pass, ""},
		{"http://203.0.113.7/", pass, ""},
		{"http://public.test:65535/", pass, ""},

		// Bad scheme.
		{"ftp://public.test/file", bad, `bad URL: scheme "ftp" not allowed (want http or https)`},
		{"file:///etc/passwd", bad, `bad URL: scheme "file" not allowed (want http or https)`},
		{"gopher://public.test:70/_GET", bad, `bad URL: scheme "gopher" not allowed (want http or https)`},
		{"javascript:alert(1)", bad, ""},
		{"ws://public.test/", bad, ""},
		{"public.test/path", bad, "bad URL: not an absolute URL (want http:// or https://)"},
		{"//public.test/path", bad, ""},
		{"", bad, ""},
		// Credentials.
		{"http://user:pass@public.test/", bad, "bad URL: credentials (userinfo) in URLs are not accepted"},
		{"http://user@public.test/", bad, ""},
		{"http://:@public.test/", bad, ""},
		{"http://public.test@127.0.0.1/", bad, ""},
		// Missing or malformed host.
		{"http:///path", bad, "bad URL: missing host"},
		{"http://", bad, ""},
		{"http:public.test", bad, ""},
		{"http://:80/", bad, ""},
		{"http://exa mple.test/", bad, ""},
		{"http://a,b.test/", bad, ""},
		{"http://bücher.test/", bad, ""},
		{"http://[::1/", bad, ""},
		{"http://0x5d.0xb8.0xd8.0x22/", bad, `bad URL: numeric host "0x5d.0xb8.0xd8.0x22" must be written as 93.184.216.34`},
		{"http://1.2.3.4.5/", bad, ""},
		{"http://256.1.1.1/", bad, ""},
		// Bad port.
		{"http://public.test:0/", bad, `bad URL: invalid port "0"`},
		{"http://public.test:65536/", bad, ""},
		{"http://public.test:99999999999/", bad, ""},
		{"http://public.test:http/", bad, ""},

		// IP literals.
		{"http://10.1.2.3/", denied, "destination not allowed: 10.1.2.3 is private"},
		{"http://127.0.0.1:8080/", denied, "destination not allowed: 127.0.0.1 is loopback"},
		{"http://169.254.169.254/latest/meta-data/", denied, "destination not allowed: 169.254.169.254 is cloud metadata (link-local)"},
		{"http://0.0.0.0/", denied, ""},
		{"http://[::1]/", denied, "destination not allowed: ::1 is loopback"},
		{"http://[::]/", denied, ""},
		{"http://[::ffff:127.0.0.1]/", denied, "destination not allowed: ::ffff:127.0.0.1 is loopback (IPv4-mapped 127.0.0.1)"},
		{"http://[::ffff:7f00:1]:80/", denied, ""},
		{"http://[::127.0.0.1]/", denied, ""},
		{"http://[64:ff9b::a01:203]/", denied, "destination not allowed: 64:ff9b::a01:203 is private (NAT64 10.1.2.3)"},
		{"http://[2002:a01:203::1]/", denied, ""},
		{"http://[2001::1]/", denied, ""},
		{"http://[fd00:ec2::254]/", denied, "destination not allowed: fd00:ec2::254 is cloud metadata (unique local)"},
		{"http://[fe80::1]/", denied, ""},
		{"http://[fe80::1%25eth0]/", denied, "destination not allowed: fe80::1%eth0 is zoned (scoped to a local interface)"},
		{"http://[ff02::1]/", denied, ""},
		{"http://192.0.2.1/", denied, "destination not allowed: 192.0.2.1 is documentation"},
		// Numeric disguises of 127.0.0.1 and 0.0.0.0.
		{"http://2130706433/", denied, "destination not allowed: 127.0.0.1 (2130706433) is loopback"},
		{"http://0x7f.1/", denied, ""},
		{"http://0x7F000001/", denied, ""},
		{"http://017700000001/", denied, ""},
		{"http://127.1/", denied, ""},
		{"http://0177.0.0.1/", denied, ""},
		{"http://127.000.000.001/", denied, ""},
		{"http://0/", denied, ""},
		{"http://%31%32%37.0.0.1/", bad, ""}, // Go refuses escapes in hosts
		// Names.
		{"http://private.test/", denied, "destination not allowed: private.test resolves to an address that is private"},
		{"http://mixed.test/", denied, ""},
		{"http://mixed6.test/", denied, ""},
		{"http://metadata.test/", denied, ""},
		{"http://v6local.test/", denied, ""},
		{"http://mapped.test/", denied, "destination not allowed: mapped.test resolves to an address that is loopback"},
		{"http://nat64.test/", denied, "destination not allowed: nat64.test resolves to an address that is cloud metadata"},
		{"http://zoned.test/", denied, ""},
		{"http://localhost/", denied, "destination not allowed: localhost is a loopback name"},
		{"http://LOCALHOST.:8080/", denied, ""},
		{"http://foo.localhost/", denied, ""},
		{"http://hooks.internal.evil.test/", other, ""},
		// Resolver failures are neither.
		{"http://nxdomain.test/", other, ""},
		{"http://empty.test/", other, "egress: resolving empty.test: no addresses"},
	}
	for _, tc := range tests {
		t.Run(tc.url, func(t *testing.T) {
			err := p.CheckURL(context.Background(), tc.url)
			if got := outcome(err); got != tc.want {
				t.Fatalf("CheckURL(%q) = %v (%s); want %s", tc.url, err, got, tc.want)
			}
			if tc.msg != "" && err.Error() != tc.msg {
				t.Errorf("CheckURL(%q) error %q; want %q", tc.url, err, tc.msg)
			}
		})
	}

	// The resolver is never asked about localhost names and numeric hosts.
	for _, name := range []string{"localhost", "foo.localhost", "2130706433", "0x7f.1"} {
		if n := r.lookups(name); n != 0 {
			t.Errorf("resolver asked %d times about %q", n, name)
		}
	}
}

func TestCheckURLResolverError(t *testing.T) {
	t.Parallel()
	p, err := New(nil, WithResolver(newFakeResolver(t, nil)))
	if err != nil {
		t.Fatal(err)
	}
	err = p.CheckURL(context.Background(), "https://nxdomain.test/")
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Errorf("CheckURL = %v; want a wrapped not-found *net.DNSError", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.CheckURL(ctx, "https://public.test/"); !errors.Is(err, context.Canceled) {
		t.Errorf("CheckURL(canceled ctx) = %v; want context.Canceled", err)
	}
}

// TestZeroPolicyCheckURL uses the zero Policy (net.DefaultResolver) with IP
// literals only, so no lookup happens.
func TestZeroPolicyCheckURL(t *testing.T) {
	t.Parallel()
	var p Policy
	for url, want := range map[string]string{
		"http://93.184.216.34/":     pass,
		"http://[2001:4860::8888]/": pass,
		"http://10.0.0.1/":          denied,
		"http://[::1]/":             denied,
		"http://localhost/":         denied,
		"gopher://93.184.216.34/":   bad,
	} {
		if got := outcome(p.CheckURL(context.Background(), url)); got != want {
			t.Errorf("CheckURL(%q) = %s; want %s", url, got, want)
		}
	}
}
