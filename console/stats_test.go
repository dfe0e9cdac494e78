package console

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The windows' counts are the counters' increase per step; refusals of
// every kind are one series, handshakes none; latency is the mean of the
// step's attempts.
func TestStatsWindow(t *testing.T) {
	reg := prometheus.NewRegistry()
	in := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hookgate_inbound_requests_total"}, []string{"source", "outcome"})
	rounds := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hookgate_delivery_rounds_total"}, []string{"route", "outcome"})
	lat := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "hookgate_delivery_attempt_duration_seconds"}, []string{"route"})
	reg.MustRegister(in, rounds, lat)
	s := NewStats(reg, time.Minute)
	t0 := time.Unix(1_700_000_000, 0)
	s.Sample(t0)
	for m := 1; m <= 90; m++ { // 90 minutes: each minute one accepted, m%3==0 one refused
		in.WithLabelValues("shop", "accepted").Inc()
		in.WithLabelValues("shop", "handshake").Inc()
		if m%3 == 0 {
			in.WithLabelValues("shop", "unauthorized").Inc()
			in.WithLabelValues("shop", "invalid").Inc()
		}
		rounds.WithLabelValues("r", "succeeded").Inc()
		lat.WithLabelValues("r").Observe(0.010)
		lat.WithLabelValues("r").Observe(0.030)
		s.Sample(t0.Add(time.Duration(m) * time.Minute))
	}
	hour := s.Window(time.Hour, time.Minute)
	if len(hour.Times) != 60 {
		t.Fatalf("hour has %d steps, want 60", len(hour.Times))
	}
	if got := hour.IntakeTotal["shop accepted"]; got != 60 {
		t.Errorf("accepted in the last hour: %v, want 60", got)
	}
	if got := hour.IntakeTotal["shop refused"]; got != 40 {
		t.Errorf("refused in the last hour: %v, want 40 (two kinds, every third minute)", got)
	}
	if _, ok := hour.IntakeTotal["shop handshake"]; ok {
		t.Error("handshakes are counted")
	}
	if got := hour.LatencyMean["r"]; math.Abs(got-20) > 1e-9 {
		t.Errorf("mean latency %v ms, want 20", got)
	}
	if v := hour.Intake["shop accepted"]; len(v) != 60 || *v[0] != 1 || *v[59] != 1 {
		t.Errorf("accepted per minute: %d steps", len(v))
	}
	if hour.To != t0.Add(90*time.Minute).Unix() || hour.From != hour.To-3600 {
		t.Errorf("hour from %d to %d", hour.From, hour.To)
	}
	day := s.Window(24*time.Hour, 15*time.Minute)
	if len(day.Times) != 6 || day.DeliveryTotal["r succeeded"] != 90 {
		t.Errorf("day: %d steps, %v rounds", len(day.Times), day.DeliveryTotal["r succeeded"])
	}
	if v := day.Delivery["r succeeded"]; *v[len(v)-1] != 15 {
		t.Errorf("rounds in the last 15 minutes: %v, want 15", *v[len(v)-1])
	}
	// A day and more: the oldest samples go.
	for m := 91; m <= 24*60+30; m++ {
		s.Sample(t0.Add(time.Duration(m) * time.Minute))
	}
	if len(s.samples) != s.keep {
		t.Errorf("%d samples kept, want %d", len(s.samples), s.keep)
	}
	// The last day is minutes 30 to 1470: 60 of the 90 accepted.
	if got := s.Window(24*time.Hour, 15*time.Minute).IntakeTotal["shop accepted"]; got != 60 {
		t.Errorf("accepted in the last day: %v, want 60", got)
	}
}
