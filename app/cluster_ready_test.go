package app

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// In cluster mode /readyz/delivery also checks the two KV buckets (found,
// their streams with a leader, answering within the probe's bound);
// /readyz does not look at them.
func TestReadyDeliveryChecksClusterBuckets(t *testing.T) {
	nc := gatewaytest.RunNATSCluster(t, 3)
	var log gatewaytest.SyncBuffer
	a := startAppLogged(t, fmt.Sprintf(`
nats: {url: %q, replicas: 3, connect_timeout: 5s}
cluster: {enabled: true}
routes:
  - {name: billing, sources: [stripe], url: "http://127.0.0.1:1"}
`, nc.URL), &log)
	gatewaytest.WaitFor(t, "/readyz/delivery with both buckets ok", 30*time.Second, func() (bool, string) {
		code, ans := delivery(t, a)
		claims, deliveries := ans.check("cluster claims"), ans.check("cluster deliveries")
		return code == 200 && claims.OK && deliveries.OK, fmt.Sprintf("%d %+v", code, ans)
	})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Broker().JetStream().DeleteKeyValue(ctx, "HOOKGATE_DELIVERIES"); err != nil {
		t.Fatal(err)
	}
	code, ans := delivery(t, a)
	if ch := ans.check("cluster deliveries"); code != 503 || ch.OK || !strings.Contains(ch.Reason, "HOOKGATE_DELIVERIES") {
		t.Errorf("/readyz/delivery without the deliveries bucket: %d %+v; want 503, the check failing and naming the bucket", code, ans)
	}
	if !ans.check("cluster claims").OK {
		t.Errorf("claims check failed: %+v", ans)
	}
	if code, ans := ready(t, a); code != 200 {
		t.Errorf("/readyz without the deliveries bucket: %d %+v; want 200", code, ans)
	}
}

// A NATS user refused the takes bucket's subjects gets no record written,
// so its routes do not pull: /readyz/delivery says so, naming the bucket,
// instead of answering ok while nothing is delivered.
func TestReadyDeliveryChecksTakes(t *testing.T) {
	srv := gatewaytest.RunNATSWith(t, server.Options{StoreDir: t.TempDir(), Users: []*server.User{{
		Username: "hookgate", Password: "pw",
		Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"$KV.HOOKGATE_TAKES.>"}},
		},
	}}})
	var log gatewaytest.SyncBuffer
	a := startAppLogged(t, fmt.Sprintf(`
nats: {url: "nats://hookgate:pw@%s", connect_timeout: 5s}
cluster: {enabled: true}
routes:
  - {name: billing, sources: [stripe], url: "http://127.0.0.1:1"}
`, srv.Addr()), &log)
	gatewaytest.WaitFor(t, "/readyz/delivery failing on the takes", 60*time.Second, func() (bool, string) {
		code, ans := delivery(t, a)
		ch := ans.check("cluster takes")
		return code == 503 && !ch.OK && strings.Contains(ch.Reason, "HOOKGATE_TAKES") && strings.Contains(ch.Reason, "cannot record"),
			fmt.Sprintf("%d %+v", code, ans)
	})
	for _, name := range []string{"cluster claims", "cluster deliveries"} {
		if _, ans := delivery(t, a); !ans.check(name).OK {
			t.Errorf("check %q failed: %+v", name, ans)
		}
	}
}
