package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stripe/stripe-go/v83/webhook"

	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// BenchmarkIntakeCluster is intake over HTTP (16 clients, distinct
// events, one gateway on an external nats-server) with cluster mode off
// and on: the difference per event is what the cluster claim costs (a KV
// Create at intake; the relay's claim before publishing is remembered).
//
//	go test -run '^$' -bench IntakeCluster -benchtime 20000x ./app/
func BenchmarkIntakeCluster(b *testing.B) {
	for _, mode := range []string{"off", "on", "off-r3", "on-r3"} {
		b.Run(mode, func(b *testing.B) {
			var extra string
			if strings.HasSuffix(mode, "-r3") {
				extra = fmt.Sprintf("nats: {url: %q, replicas: 3}\n", gatewaytest.RunNATSCluster(b, 3).URL)
			} else {
				extra = fmt.Sprintf("nats: {url: %q}\n", gatewaytest.RunNATS(b, 0, b.TempDir()).ClientURL())
			}
			if strings.HasPrefix(mode, "on") {
				extra += "cluster: {enabled: true}\n"
			}
			a := startBenchApp(b, extra)
			url := "http://" + a.Addr() + "/webhooks/stripe"
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			var n atomic.Int64
			b.SetParallelism(8) // 16 clients on 2 cores
			b.ResetTimer()
			cpu := gatewaytest.CPUTime()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					body := []byte(fmt.Sprintf(`{"id":"evt_bench_%s_%d","type":"invoice.paid"}`, mode, n.Add(1)))
					p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret})
					req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
					req.Header.Set("Stripe-Signature", p.Header)
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					got, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 || !strings.Contains(string(got), "accepted") {
						b.Errorf("%d %s", resp.StatusCode, got)
						return
					}
				}
			})
			b.ReportMetric(float64(gatewaytest.CPUTime()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// startBenchApp starts a gateway on a data_dir of its own with one Stripe
// source and extra config, stopped when b ends.
func startBenchApp(b *testing.B, extra string) *App {
	b.Helper()
	yaml := fmt.Sprintf("listen: \"127.0.0.1:0\"\ndata_dir: %q\nsources:\n  - {name: stripe, verify: stripe, secrets: [%q]}\n%s",
		b.TempDir(), secret, extra)
	cfg, err := config.Parse([]byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		b.Fatal(err)
	}
	a := New(cfg, slog.New(slog.DiscardHandler))
	if err := a.Start(context.Background()); err != nil {
		_ = a.Stop(context.Background())
		b.Fatalf("Start: %v", err)
	}
	b.Cleanup(func() { _ = a.Stop(context.Background()) })
	return a
}
