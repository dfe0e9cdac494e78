package outbound

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/store"
)

// Metrics counts delivery rounds and attempts. A nil *Metrics counts nothing.
type Metrics struct {
	rounds       *prometheus.CounterVec
	attempts     *prometheus.HistogramVec
	filters      *prometheus.CounterVec
	filterErrors *prometheus.CounterVec
}

// NewMetrics registers the delivery metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		rounds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookgate_delivery_rounds_total",
			Help: "Delivery rounds by route and outcome (succeeded, retrying, dead, failed: a manual retry that failed).",
		}, []string{"route", "outcome"}),
		attempts: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hookgate_delivery_attempt_duration_seconds",
			Help:    "Duration of each HTTP attempt, by route.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route"}),
		filters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookgate_route_filtered_total",
			Help: "Deliveries a route's filter rejected (recorded filtered, never sent), by route; filter errors included.",
		}, []string{"route"}),
		filterErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookgate_route_filter_errors_total",
			Help: "Route filter evaluations that failed (e.g. a missing field), counted as not matching, by route.",
		}, []string{"route"}),
	}
	reg.MustRegister(m.rounds, m.attempts, m.filters, m.filterErrors)
	return m
}

func (m *Metrics) round(route, outcome string, attempts []store.Attempt) {
	if m == nil {
		return
	}
	if outcome != "" {
		m.rounds.WithLabelValues(route, outcome).Inc()
	}
	h := m.attempts.WithLabelValues(route)
	for _, a := range attempts {
		h.Observe(a.Duration.Seconds())
	}
}

// filtered counts a delivery route's filter rejected (errored: it failed).
func (m *Metrics) filtered(route string, errored bool) {
	if m == nil {
		return
	}
	m.filters.WithLabelValues(route).Inc()
	if errored {
		m.filterErrors.WithLabelValues(route).Inc()
	}
}

// Collector reports each route's state and backlog at scrape time:
// hookgate_route_paused (1 while the breaker is open or probing, or an
// operator paused it) and hookgate_route_backlog.
func (e *Engine) Collector() prometheus.Collector { return routeCollector{e} }

type routeCollector struct{ e *Engine }

var (
	routePausedDesc = prometheus.NewDesc("hookgate_route_paused",
		"1 while a route is paused (breaker open or probing, or paused by an operator).", []string{"route", "state"}, nil)
	routeBacklogDesc = prometheus.NewDesc("hookgate_route_backlog",
		"Messages of a route not yet delivered or acknowledged.", []string{"route"}, nil)
)

func (c routeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- routePausedDesc
	ch <- routeBacklogDesc
}

func (c routeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, st := range c.e.Routes(ctx) {
		paused := 0.0
		if st.State != RouteActive {
			paused = 1
		}
		ch <- prometheus.MustNewConstMetric(routePausedDesc, prometheus.GaugeValue, paused, st.Name, st.State)
		ch <- prometheus.MustNewConstMetric(routeBacklogDesc, prometheus.GaugeValue, float64(st.Backlog), st.Name)
	}
}
