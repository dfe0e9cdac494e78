package app

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// /readyz/delivery, asked every few seconds by each load balancer, lists
// the stream's consumers once; it does not ask JetStream for each
// route's consumer (the routes' states it shows are the gateway's own).
func TestReadyDeliveryAsksNoConsumerInfo(t *testing.T) {
	srv := gatewaytest.RunNATS(t, -1, t.TempDir())
	var log gatewaytest.SyncBuffer
	a := startAppLogged(t, fmt.Sprintf(`
nats: {url: %q}
routes:
  - {name: a, sources: [stripe], url: "http://127.0.0.1:1"}
  - {name: b, sources: [stripe], url: "http://127.0.0.1:1"}
  - {name: c, sources: [stripe], url: "http://127.0.0.1:1"}
`, srv.ClientURL()), &log)
	gatewaytest.WaitFor(t, "/readyz/delivery 200", 30*time.Second, func() (bool, string) {
		code, ans := delivery(t, a)
		return code == 200, fmt.Sprintf("%d %+v", code, ans)
	})
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var infos atomic.Int64
	if _, err := nc.Subscribe("$JS.API.CONSUMER.INFO.>", func(*nats.Msg) { infos.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	const probes = 5
	for range probes {
		code, body := get(t, "http://"+a.Addr()+"/readyz/delivery", "")
		var ans struct {
			Routes []routeState `json:"routes"`
		}
		if err := json.Unmarshal([]byte(body), &ans); err != nil || code != 200 || len(ans.Routes) != 4 {
			t.Fatalf("/readyz/delivery: %d %s; want 200 with 4 routes (3 and _tasks)", code, body)
		}
	}
	// A pull loop may look its consumer up meanwhile; the probes asked
	// for 2 per route each (40) before.
	if got := infos.Load(); got >= probes {
		t.Errorf("%d probes asked JetStream for consumer info %d times; want none of theirs", probes, got)
	}
}
