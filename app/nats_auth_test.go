package app

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// An external NATS that refuses the gateway's credentials: /readyz/delivery
// says so (and nothing about the server), and the log names it.
func TestReadyDeliveryNamesRefusedCredentials(t *testing.T) {
	pub, _ := gatewaytest.NkeyUser(t)
	_, wrong := gatewaytest.NkeyUser(t)
	srv := gatewaytest.RunNATSWith(t, server.Options{StoreDir: t.TempDir(), Nkeys: []*server.NkeyUser{{Nkey: pub}}})
	var log gatewaytest.SyncBuffer
	a := startAppLogged(t, fmt.Sprintf("nats: {url: %q, credentials: %q, connect_timeout: 2s}\n", srv.ClientURL(), wrong), &log)
	gatewaytest.WaitFor(t, "/readyz/delivery naming the refused credentials", 30*time.Second, func() (bool, string) {
		code, ans := delivery(t, a)
		c := ans.check("nats")
		return code == 503 && strings.Contains(c.Reason, "refused the credentials"), fmt.Sprintf("%d %+v", code, ans)
	})
	if _, ans := delivery(t, a); strings.Contains(fmt.Sprint(ans), "127.0.0.1") {
		t.Errorf("/readyz/delivery names the server: %+v", ans)
	}
	if !strings.Contains(log.String(), "Authorization Violation") {
		t.Errorf("the log does not name the refusal:\n%s", log.String())
	}
}
