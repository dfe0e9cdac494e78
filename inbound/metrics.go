package inbound

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts inbound requests. A nil *Metrics counts nothing.
type Metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

// NewMetrics registers the inbound metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookgate_inbound_requests_total",
			Help: "Inbound webhook requests by source and outcome.",
		}, []string{"source", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hookgate_inbound_duration_seconds",
			Help:    "Time from request to answer, including the durable commit.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"outcome"}),
	}
	reg.MustRegister(m.requests, m.latency)
	return m
}

func (m *Metrics) observe(source, outcome string, start time.Time) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(source, outcome).Inc()
	m.latency.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
}

// outcomeMetrics are one source's counter and the latency histogram of one
// outcome, looked up once: the label lookup costs more than the count.
type outcomeMetrics struct {
	requests prometheus.Counter
	latency  prometheus.Observer
}

// forOutcome returns the metrics of source and outcome, or nil for a nil m.
func (m *Metrics) forOutcome(source, outcome string) *outcomeMetrics {
	if m == nil {
		return nil
	}
	return &outcomeMetrics{requests: m.requests.WithLabelValues(source, outcome), latency: m.latency.WithLabelValues(outcome)}
}

func (o *outcomeMetrics) observe(start time.Time) {
	if o == nil {
		return
	}
	o.requests.Inc()
	o.latency.Observe(time.Since(start).Seconds())
}
