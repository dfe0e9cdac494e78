package jetstream

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// Gateways started at once on a new NATS cluster make the events stream
// and the routes' consumers together: nats-server answers only one of
// equal creations in flight at once, and the others find what was made
// at its leader election instead of waiting out their timeout. Every
// start finds the stream, logs nothing at warn, and every consumer is
// made or found on the first call.
func TestFirstStartOfSeveralGateways(t *testing.T) {
	nc := gatewaytest.RunNATSCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const gateways, routes = 3, 3
	logs := make([]*gatewaytest.LogBuffer, gateways)
	brokers := make([]*Broker, gateways)
	for i := range brokers {
		logs[i] = &gatewaytest.LogBuffer{}
		log := slog.New(slog.NewTextHandler(logs[i], &slog.HandlerOptions{Level: slog.LevelWarn}))
		brokers[i] = New(Config{URL: nc.URL, Stream: "EVENTS", Replicas: 3, ConnectTimeout: 30 * time.Second}, log)
		defer brokers[i].Close()
	}
	var wg sync.WaitGroup
	errs := make(chan error, gateways*(routes+1))
	for i, b := range brokers {
		wg.Go(func() {
			if err := b.Start(ctx); err != nil {
				errs <- fmt.Errorf("gateway %d: start: %w", i, err)
				return
			}
			var cwg sync.WaitGroup
			for r := range routes {
				cwg.Go(func() {
					cc := natsjs.ConsumerConfig{Durable: fmt.Sprintf("route_%d", r), AckPolicy: natsjs.AckExplicitPolicy, FilterSubjects: []string{"webhooks_EVENTS.>"}}
					if _, err := b.EnsureConsumer(ctx, cc); err != nil {
						errs <- fmt.Errorf("gateway %d: %w", i, err)
					}
				})
			}
			cwg.Wait()
		})
	}
	wg.Wait()
	close(errs)
	var failed []string
	for err := range errs {
		failed = append(failed, err.Error())
	}
	for i, l := range logs {
		if s := l.String(); s != "" {
			failed = append(failed, fmt.Sprintf("gateway %d logged: %s", i, s))
		}
	}
	if len(failed) > 0 {
		t.Fatal(strings.Join(failed, "\n"))
	}
}
