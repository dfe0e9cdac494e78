package outbound_test

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/store"
)

// A route's requests go through its proxy, with the proxy's credentials
// from the URL's userinfo; another route's do not.
func TestRouteThroughProxy(t *testing.T) {
	proxied := newDownstream(t, nil)
	direct := newDownstream(t, nil)
	proxy := gatewaytest.RunForwardProxy(t, "")
	proxyURL := strings.Replace(proxy.URL, "http://", "http://hookgate:pr0xy-pw@", 1)
	g := startGateway(t, baseConfig(t,
		routeYAML("proxied", proxied.URL, fmt.Sprintf(`, events: ["a.*"], proxy: %q`, proxyURL))+
			routeYAML("direct", direct.URL, `, events: ["b.*"]`)))
	g.send(t, "evt_a", "a.x")
	g.send(t, "evt_b", "b.x")
	g.waitState(t, "proxied", "stripe", "evt_a", store.StateSucceeded)
	g.waitState(t, "direct", "stripe", "evt_b", store.StateSucceeded)

	got := proxy.Requests()
	if len(got) != 1 || got[0].URL != proxied.URL+"/" && got[0].URL != proxied.URL {
		t.Fatalf("the proxy forwarded %+v, want one request to %s", got, proxied.URL)
	}
	if want := "Basic " + base64.StdEncoding.EncodeToString([]byte("hookgate:pr0xy-pw")); got[0].ProxyAuth != want {
		t.Errorf("Proxy-Authorization %q, want %q", got[0].ProxyAuth, want)
	}
	if r := proxied.requests(); len(r) != 1 || r[0].eventID != "evt_a" {
		t.Errorf("the proxied route's downstream got %+v", r)
	}
}

// A proxy that cannot be reached is a failed attempt whose error names
// the proxy's failure, without its credentials.
func TestProxyDownIsFailedAttempt(t *testing.T) {
	ds := newDownstream(t, nil)
	proxyURL := fmt.Sprintf("http://hookgate:pr0xy-pw@127.0.0.1:%d", gatewaytest.FreePort(t))
	g := startGateway(t, baseConfig(t, routeYAML("r", ds.URL, fmt.Sprintf(`, retries: 0, schedule: [1h], proxy: %q`, proxyURL))))
	g.send(t, "evt_1", "invoice.paid")
	d := g.waitState(t, "r", "stripe", "evt_1", store.StateRetrying)
	if !strings.Contains(d.LastError, "proxyconnect") || strings.Contains(d.LastError, "pr0xy-pw") {
		t.Errorf("last error %q, want the proxy's failure without its password", d.LastError)
	}
	if n := len(ds.requests()); n != 0 {
		t.Errorf("the downstream got %d requests around the proxy", n)
	}
}
