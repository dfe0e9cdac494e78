package app

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// /readyz/delivery in cluster mode checks the pauses bucket
// (HOOKGATE_ROUTES) and the records stream (HOOKGATE_RECORDS) as it does
// the claims and deliveries buckets: gone, it fails naming them (no URL
// in the answer); made again by the gateway's own loops (logged), it is
// 200 again.
func TestReadyDeliveryChecksPausesAndRecords(t *testing.T) {
	nc := gatewaytest.RunNATSCluster(t, 3)
	var log gatewaytest.SyncBuffer
	a := startAppLogged(t, fmt.Sprintf(`
nats: {url: %q, replicas: 3, connect_timeout: 5s}
cluster: {enabled: true}
routes:
  - {name: billing, sources: [stripe], url: "http://127.0.0.1:1"}
`, nc.URL), &log)
	allOK := func() (bool, string) {
		code, ans := delivery(t, a)
		return code == 200 && ans.check("cluster pauses").OK && ans.check("cluster records").OK, fmt.Sprintf("%d %+v", code, ans)
	}
	gatewaytest.WaitFor(t, "/readyz/delivery with the pauses bucket and the records stream ok", 30*time.Second, allOK)
	if fams, err := a.Registry.Gather(); err != nil || !slices.ContainsFunc(fams, func(mf *dto.MetricFamily) bool {
		return mf.GetName() == "hookgate_cluster_records_outbox"
	}) {
		t.Errorf("hookgate_cluster_records_outbox not registered (%v)", err)
	}

	// The loops that would make them again are stopped while they are
	// gone, so the answer below is the check's, not a race with them.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = a.pauses.Stop(ctx)
	_ = a.records.Stop(ctx)
	js := a.Broker().JetStream()
	if err := js.DeleteKeyValue(ctx, "HOOKGATE_ROUTES"); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, "HOOKGATE_RECORDS"); err != nil {
		t.Fatal(err)
	}
	code, ans := delivery(t, a)
	if code != 503 {
		t.Errorf("/readyz/delivery without the pauses bucket and the records stream: %d %+v; want 503", code, ans)
	}
	for name, want := range map[string]string{"cluster pauses": "HOOKGATE_ROUTES", "cluster records": "HOOKGATE_RECORDS"} {
		ch := ans.check(name)
		if ch.OK || !strings.Contains(ch.Reason, want) {
			t.Errorf("check %q: %+v; want it failing, naming %s", name, ch, want)
		}
		if strings.Contains(ch.Reason, "nats://") || strings.Contains(ch.Reason, "127.0.0.1") {
			t.Errorf("check %q names an address: %q", name, ch.Reason)
		}
	}
	for _, name := range []string{"cluster claims", "cluster deliveries"} {
		if !ans.check(name).OK {
			t.Errorf("check %q failed: %+v", name, ans)
		}
	}
	if code, ans := ready(t, a); code != 200 {
		t.Errorf("/readyz without them: %d %+v; want 200", code, ans)
	}

	if err := a.records.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := a.pauses.Start(context.Background(), a.engine); err != nil {
		t.Fatal(err)
	}
	gatewaytest.WaitFor(t, "/readyz/delivery ok again", 60*time.Second, allOK)
	// The check can see what was made before its maker logs it.
	for _, msg := range []string{"bucket=HOOKGATE_ROUTES", "stream=HOOKGATE_RECORDS"} {
		gatewaytest.WaitFor(t, msg+" logged at INFO made at the start and made again", 30*time.Second, func() (bool, string) {
			n, _ := logLines(log.String(), "INFO", msg)
			return n >= 2, fmt.Sprintf("%d times:\n%s", n, log.String())
		})
	}
}

// The records stream deleted while a gateway runs is made again by the
// gateway, logged, and the events it takes afterwards (each published
// after its record) are delivered. (cluster TestRecordsStreamGoneMadeAgain
// has the gateway idle: no round record of its own to make it again.)
func TestRecordsStreamDeletedWhileRunning(t *testing.T) {
	srv := gatewaytest.RunNATS(t, 0, t.TempDir())
	var got atomic.Int64
	down := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { got.Add(1) }))
	t.Cleanup(down.Close)
	var log gatewaytest.SyncBuffer
	a := startAppLogged(t, fmt.Sprintf(`
nats: {url: %q, connect_timeout: 5s}
cluster: {enabled: true}
routes:
  - {name: billing, sources: [stripe], url: %q}
`, srv.ClientURL(), down.URL), &log)
	if code, body := postStripe(t, a, "evt_before"); code/100 != 2 {
		t.Fatalf("post: %d %s", code, body)
	}
	gatewaytest.WaitFor(t, "the first event delivered, its round's record published", 30*time.Second, func() (bool, string) {
		n, err := a.Store().CountRecordsOut(context.Background())
		return got.Load() == 1 && n == 0 && err == nil, fmt.Sprint(got.Load(), " delivered, ", n, " records out, ", err)
	})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Broker().JetStream().DeleteStream(ctx, "HOOKGATE_RECORDS"); err != nil {
		t.Fatal(err)
	}
	if code, body := postStripe(t, a, "evt_after"); code/100 != 2 {
		t.Fatalf("post: %d %s", code, body)
	}
	gatewaytest.WaitFor(t, "the event taken after the stream was deleted delivered", 60*time.Second, func() (bool, string) {
		return got.Load() == 2, fmt.Sprint(got.Load())
	})
	gatewaytest.WaitFor(t, "the stream made again", 30*time.Second, func() (bool, string) {
		_, err := a.Broker().JetStream().Stream(ctx, "HOOKGATE_RECORDS")
		return err == nil, fmt.Sprint(err)
	})
	if n, _ := logLines(log.String(), "INFO", "cluster records: stream created"); n < 2 {
		t.Errorf("the stream's making logged %d times; want at the start and again:\n%s", n, log.String())
	}
}
