package outbound

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/store"
)

// Metrics counts delivery rounds and attempts. A nil *Metrics counts nothing.
type Metrics struct {
	rounds   *prometheus.CounterVec
	attempts *prometheus.HistogramVec
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
	}
	reg.MustRegister(m.rounds, m.attempts)
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
