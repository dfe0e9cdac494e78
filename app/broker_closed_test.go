package app

import (
	"fmt"
	"testing"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// NATS closes the gateway's connection for good while it runs: with an
// external server (through a proxy that sends an -ERR nats.go does not
// know) and with the embedded one (the connection closed under the
// broker). The broker connects anew; the relay publishes, the routes
// deliver, and /readyz/delivery is 200 again, without a restart.
func TestBrokerConnectsAnewAfterClosed(t *testing.T) {
	for _, external := range []bool{true, false} {
		t.Run(map[bool]string{true: "external", false: "embedded"}[external], func(t *testing.T) {
			ds, delivered := countingDownstream(t)
			natsCfg := ""
			var proxy *gatewaytest.ErrProxy
			if external {
				srv := runNATS(t, 0, t.TempDir())
				proxy = gatewaytest.RunErrProxy(t, srv.Addr().String())
				natsCfg = fmt.Sprintf("nats: {url: %q, connect_timeout: 2s}", proxy.URL())
			}
			cfg := testConfig(t, fmt.Sprintf(`
%s
routes:
  - {name: billing, sources: [stripe], url: %q}
`, natsCfg, ds.URL))
			a := startApp(t, cfg)
			for i := range 5 {
				if code, body := postStripe(t, a, fmt.Sprintf("evt_before_%d", i)); code != 200 {
					t.Fatalf("post: %d %s", code, body)
				}
			}
			waitFor(t, "5 delivered", func() (bool, string) { n := delivered(); return n == 5, fmt.Sprint(n) })

			old := a.Broker().Conn()
			if external {
				if n := proxy.SendErr("some unknown error"); n != 1 {
					t.Fatalf("the -ERR went to %d clients", n)
				}
			} else {
				old.Close()
			}
			waitFor(t, "the connection closed", func() (bool, string) { return old.IsClosed(), old.Status().String() })
			for i := range 20 {
				if code, body := postStripe(t, a, fmt.Sprintf("evt_after_%d", i)); code != 200 {
					t.Fatalf("post: %d %s", code, body)
				}
			}
			waitFor(t, "25 delivered", func() (bool, string) { n := delivered(); return n == 25, fmt.Sprint(n) })
			waitFor(t, "/readyz/delivery 200 again", func() (bool, string) {
				code, r := delivery(t, a)
				return code == 200, fmt.Sprintf("%d %+v", code, r)
			})
		})
	}
}
