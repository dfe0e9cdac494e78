package app

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hookgate/hookgate/admin"
	"github.com/hookgate/hookgate/httperror"
	"github.com/hookgate/hookgate/store"
)

// newRegistry is the app's registry, with the Go runtime, process and
// build metrics already in it.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "hookgate_build_info",
			Help:        "Always 1; the version label is the gateway's version.",
			ConstLabels: prometheus.Labels{"version": Version},
		}, func() float64 { return 1 }),
	)
	return reg
}

// countCacheFor is how long a count read for a gauge is reused: scrapes,
// however many, cost one count per interval.
const countCacheFor = 5 * time.Second

// cachedCount caches a count read from the store for countCacheFor.
type cachedCount struct {
	read func(context.Context) (int64, error)

	mu  sync.Mutex
	at  time.Time
	val float64
}

func (c *cachedCount) get() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < countCacheFor {
		return c.val
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if n, err := c.read(ctx); err == nil {
		c.val = float64(n)
	} // else: the last value stands
	c.at = time.Now()
	return c.val
}

// registerStoreMetrics adds the gauges read from the store and returns the
// retention counters' callback.
func (a *App) registerStoreMetrics() func(store.PruneResult) {
	backlog := &cachedCount{read: a.store.OutboxBacklog}
	pruned := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookgate_retention_pruned_total",
		Help: "Rows deleted by retention, by kind (events, deliveries, attempts, idempotency_keys).",
	}, []string{"kind"})
	for _, k := range []string{"events", "deliveries", "attempts", "idempotency_keys"} {
		pruned.WithLabelValues(k)
	}
	a.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "hookgate_outbox_backlog",
			Help: "Events committed but not yet acknowledged by JetStream (read at most every 5s).",
		}, backlog.get),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "hookgate_outbox_oldest_age_seconds",
			Help: "How long the oldest event not yet acknowledged by JetStream has waited since it was received (0: the outbox is empty).",
		}, a.outboxAge.seconds),
		pruned,
	)
	return func(r store.PruneResult) {
		pruned.WithLabelValues("events").Add(float64(r.Events))
		pruned.WithLabelValues("deliveries").Add(float64(r.Deliveries))
		pruned.WithLabelValues("attempts").Add(float64(r.Attempts))
		pruned.WithLabelValues("idempotency_keys").Add(float64(r.Keys))
	}
}

// metricsHandler serves GET /metrics from the registry, behind the
// metrics token when one is configured.
func (a *App) metricsHandler() fiber.Handler {
	serve := adaptor.HTTPHandler(promhttp.HandlerFor(a.Registry, promhttp.HandlerOpts{
		Registry:          a.Registry, // counts its own errors
		EnableOpenMetrics: false,
	}))
	token := a.cfg.Metrics.Token.Reveal()
	if token == "" {
		return serve
	}
	want := sha256.Sum256([]byte(token))
	log := a.log.With("component", "metrics")
	return func(c *fiber.Ctx) error {
		got, ok := admin.BearerToken(c.Get(fiber.HeaderAuthorization))
		sum := sha256.Sum256([]byte(got))
		if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="hookgate-metrics"`)
			log.Warn("metrics request refused: bad or missing bearer token", "path", c.Path(), "remote", c.IP())
			return httperror.New(http.StatusUnauthorized, "unauthorized", "a valid metrics bearer token is required")
		}
		return serve(c)
	}
}
