package console

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/hookgate/hookgate/internal/startstop"
)

// Stats keeps a day of this gateway's counters, one sample a minute, read
// from its Prometheus registry: intake per source and outcome, delivery
// rounds per route and outcome, attempt durations per route. It is memory
// only (a restart starts an empty day) and per gateway (in cluster mode
// each gateway shows its own traffic).
type Stats struct {
	gather prometheus.Gatherer
	every  time.Duration
	loop   startstop.Loop

	mu      sync.Mutex
	samples []sample // oldest first, at most keep
	keep    int
}

// sample is the counters' totals at one time, by series key.
type sample struct {
	at     time.Time
	totals map[key]float64
}

// key names one series: kind is "intake", "delivery", "latency_sum" or
// "latency_count".
type key struct{ kind, name, outcome string }

// StatsEvery is the default sampling interval.
const StatsEvery = time.Minute

// NewStats returns Stats reading g every interval (0: StatsEvery), keeping
// a day of samples.
func NewStats(g prometheus.Gatherer, every time.Duration) *Stats {
	if every <= 0 {
		every = StatsEvery
	}
	return &Stats{gather: g, every: every, keep: int(24*time.Hour/every) + 1}
}

// Start samples now and then every interval until Stop.
func (s *Stats) Start(ctx context.Context) error {
	s.Sample(time.Now())
	s.loop.Start(ctx, func(ctx context.Context) {
		t := time.NewTicker(s.every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				s.Sample(now)
			}
		}
	})
	return nil
}

// Stop stops sampling.
func (s *Stats) Stop(context.Context) error {
	s.loop.Stop()
	return nil
}

// Sample records the counters now.
func (s *Stats) Sample(now time.Time) {
	mfs, err := s.gather.Gather()
	if err != nil && len(mfs) == 0 {
		return
	}
	totals := map[key]float64{}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "hookgate_inbound_requests_total":
			for _, m := range mf.GetMetric() {
				outcome := label(m, "outcome")
				switch outcome {
				case "accepted", "duplicate":
				case "handshake":
					continue
				default:
					outcome = "refused"
				}
				totals[key{"intake", label(m, "source"), outcome}] += m.GetCounter().GetValue()
			}
		case "hookgate_delivery_rounds_total":
			for _, m := range mf.GetMetric() {
				totals[key{"delivery", label(m, "route"), label(m, "outcome")}] += m.GetCounter().GetValue()
			}
		case "hookgate_delivery_attempt_duration_seconds":
			for _, m := range mf.GetMetric() {
				h := m.GetHistogram()
				totals[key{"latency_sum", label(m, "route"), ""}] += h.GetSampleSum()
				totals[key{"latency_count", label(m, "route"), ""}] += float64(h.GetSampleCount())
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples = append(s.samples, sample{at: now, totals: totals})
	if len(s.samples) > s.keep {
		s.samples = append(s.samples[:0], s.samples[len(s.samples)-s.keep:]...)
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Window is a chart's data over one window: times (unix seconds, each the
// end of a step) and one series per name, each value the count in the
// step ending then (latency: the mean in milliseconds, null without
// attempts).
type Window struct {
	From     int64                 `json:"from"` // unix seconds: the window's start
	To       int64                 `json:"to"`   // and end (the last sample)
	Times    []int64               `json:"times"`
	Intake   map[string][]*float64 `json:"intake"`   // "source outcome"
	Delivery map[string][]*float64 `json:"delivery"` // "route outcome"
	Latency  map[string][]*float64 `json:"latency"`  // route
	// Totals over the window, by the same names.
	IntakeTotal   map[string]float64 `json:"intake_total"`
	DeliveryTotal map[string]float64 `json:"delivery_total"`
	LatencyMean   map[string]float64 `json:"latency_mean_ms"`
}

// Window returns the counts over the last span in steps of step.
func (s *Stats) Window(span, step time.Duration) Window {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := Window{Intake: map[string][]*float64{}, Delivery: map[string][]*float64{}, Latency: map[string][]*float64{},
		IntakeTotal: map[string]float64{}, DeliveryTotal: map[string]float64{}, LatencyMean: map[string]float64{}}
	if len(s.samples) == 0 {
		return w
	}
	w.To = s.samples[len(s.samples)-1].at.Unix()
	w.From = w.To - int64(span/time.Second)
	stride := max(1, int(step/s.every))
	n := min(len(s.samples)-1, int(span/s.every))
	last := len(s.samples) - 1
	first := last - n
	// The step boundaries, oldest first, each a sample index.
	var idx []int
	for i := last; i > first; i -= stride {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	keys := map[key]bool{}
	for k := range s.samples[last].totals {
		keys[k] = true
	}
	delta := func(k key, from, to int) float64 {
		d := s.samples[to].totals[k] - s.samples[from].totals[k]
		return max(0, d) // a counter does not go down; a reset would show negative
	}
	prev := first
	for _, i := range idx {
		w.Times = append(w.Times, s.samples[i].at.Unix())
		for k := range keys {
			switch k.kind {
			case "intake", "delivery":
				v := delta(k, prev, i)
				name := k.name + " " + k.outcome
				m := w.Intake
				if k.kind == "delivery" {
					m = w.Delivery
				}
				m[name] = append(m[name], &v)
			case "latency_count":
				var v *float64
				if c := delta(k, prev, i); c > 0 {
					ms := delta(key{"latency_sum", k.name, ""}, prev, i) / c * 1000
					v = &ms
				}
				w.Latency[k.name] = append(w.Latency[k.name], v)
			}
		}
		prev = i
	}
	for k := range keys {
		switch k.kind {
		case "intake":
			w.IntakeTotal[k.name+" "+k.outcome] = delta(k, first, last)
		case "delivery":
			w.DeliveryTotal[k.name+" "+k.outcome] = delta(k, first, last)
		case "latency_count":
			if c := delta(k, first, last); c > 0 {
				w.LatencyMean[k.name] = delta(key{"latency_sum", k.name, ""}, first, last) / c * 1000
			}
		}
	}
	return w
}
