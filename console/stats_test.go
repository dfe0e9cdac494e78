package console

import (
	"fmt"
	"math"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The windows' counts are the counters' increase per step; refusals of
// every kind are one series, handshakes none; latency is the mean of the
// step's attempts; a day is kept, no more.
func TestStatsWindow(t *testing.T) {
	reg := prometheus.NewRegistry()
	in := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hookgate_inbound_requests_total"}, []string{"source", "outcome"})
	rounds := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hookgate_delivery_rounds_total"}, []string{"route", "outcome"})
	lat := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "hookgate_delivery_attempt_duration_seconds"}, []string{"route"})
	reg.MustRegister(in, rounds, lat)
	s := NewStats(reg, StatsConfig{Every: time.Minute})
	t0 := time.Unix(1_700_000_100, 0) // on the 15-minute grid
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
	// Steps ending t0 (its sample: nothing yet), t0+15m, …, t0+90m.
	if len(day.Times) != 7 || day.DeliveryTotal["r succeeded"] != 90 {
		t.Errorf("day: %d steps, %v rounds", len(day.Times), day.DeliveryTotal["r succeeded"])
	}
	if v := day.Delivery["r succeeded"]; *v[len(v)-1] != 15 {
		t.Errorf("rounds in the last 15 minutes: %v, want 15", *v[len(v)-1])
	}
	// A day and more: the oldest samples go.
	for m := 91; m <= 24*60+30; m++ {
		s.Sample(t0.Add(time.Duration(m) * time.Minute))
	}
	if want := 24*60 + 30 - 15 + 1; len(s.own) != want { // minutes 15 to 1470
		t.Errorf("%d samples kept, want %d", len(s.own), want)
	}
	// The last day is minutes 30 to 1470: 60 of the 90 accepted.
	if got := s.Window(24*time.Hour, 15*time.Minute).IntakeTotal["shop accepted"]; got != 60 {
		t.Errorf("accepted in the last day: %v, want 60", got)
	}
}

// A sample holds each series' increase since the previous one; the first
// holds the totals (the counters start at 0 with the process); a counter
// lower than before was reset and counts from 0; nothing is negative.
func TestIncrease(t *testing.T) {
	a, b := key{"intake", "s", "accepted"}, key{"delivery", "r", "succeeded"}
	for _, c := range []struct {
		name      string
		prev, cur counts
		want      counts
	}{
		{"first sample: the totals", nil, counts{a: 3, b: 1}, counts{a: 3, b: 1}},
		{"the increase", counts{a: 3, b: 1}, counts{a: 5, b: 4}, counts{a: 2, b: 3}},
		{"unchanged left out", counts{a: 3, b: 1}, counts{a: 3, b: 2}, counts{b: 1}},
		{"a reset counts from 0", counts{a: 10}, counts{a: 4}, counts{a: 4}},
		{"a reset to 0 is nothing", counts{a: 10}, counts{a: 0}, counts{}},
		{"a new series: its total", counts{a: 1}, counts{a: 1, b: 7}, counts{b: 7}},
		{"a series gone: nothing", counts{a: 1, b: 2}, counts{a: 1}, counts{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := increase(c.prev, c.cur); !reflect.DeepEqual(got, c.want) {
				t.Errorf("increase(%v, %v) = %v, want %v", c.prev, c.cur, got, c.want)
			}
		})
	}
}

// sampleID is one gateway's sample: unix ms.
type sampleID struct {
	gateway string
	at      int64
}

// A window sums every gateway's samples per step: steps end on the grid,
// a gateway that left counts for the minutes it sent, samples before the
// window do not count, latency is weighted by the attempts.
func TestWindowSums(t *testing.T) {
	t0 := int64(1_700_000_100_000) // unix ms, on the minute
	at := func(min, sec int) int64 { return t0 + int64(min)*60_000 + int64(sec)*1000 }
	acc := key{"intake", "s", "accepted"}
	ls, lc := key{"latency_sum", "r", ""}, key{"latency_count", "r", ""}
	type step struct {
		end   int64 // unix s
		value float64
	}
	for _, c := range []struct {
		name    string
		samples map[sampleID]counts
		span    time.Duration
		steps   []step  // accepted per step
		total   float64 // accepted over the window
		latency float64 // the window's mean, ms
	}{
		{
			name: "two gateways summed per step",
			samples: map[sampleID]counts{
				{"a", at(0, 10)}: {acc: 1}, {"b", at(0, 40)}: {acc: 2},
				{"a", at(1, 10)}: {acc: 1}, {"b", at(1, 40)}: {acc: 2},
			},
			span:  time.Hour,
			steps: []step{{(t0 + 60_000) / 1000, 3}, {(t0 + 120_000) / 1000, 3}},
			total: 6,
		},
		{
			name: "a gateway that left still counts",
			samples: map[sampleID]counts{
				{"gone", at(0, 30)}: {acc: 5},
				{"b", at(0, 40)}:    {acc: 1}, {"b", at(1, 40)}: {}, {"b", at(2, 40)}: {acc: 1},
			},
			span:  time.Hour,
			steps: []step{{(t0 + 60_000) / 1000, 6}, {(t0 + 120_000) / 1000, 0}, {(t0 + 180_000) / 1000, 1}},
			total: 7,
		},
		{
			name: "before the window: not counted",
			samples: map[sampleID]counts{
				{"a", at(0, 10)}: {acc: 4}, {"a", at(1, 10)}: {acc: 1}, {"b", at(2, 10)}: {acc: 1},
			},
			span:  2 * time.Minute,
			steps: []step{{(t0 + 120_000) / 1000, 1}, {(t0 + 180_000) / 1000, 1}},
			total: 2,
		},
		{
			name: "latency weighted by attempts",
			samples: map[sampleID]counts{
				{"a", at(0, 10)}: {ls: 0.1, lc: 1}, {"b", at(0, 20)}: {ls: 0.9, lc: 3},
			},
			span:    time.Hour,
			steps:   []step{{(t0 + 60_000) / 1000, 0}},
			latency: 250,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := NewStats(prometheus.NewRegistry(), StatsConfig{})
			for id, v := range c.samples {
				s.addOther(id.gateway, id.at, v, math.MaxInt64)
			}
			w := s.Window(c.span, time.Minute)
			if len(w.Times) != len(c.steps) {
				t.Fatalf("times %v, want %d steps", w.Times, len(c.steps))
			}
			if w.To != c.steps[len(c.steps)-1].end || w.From != w.To-int64(c.span/time.Second) {
				t.Errorf("from %d to %d", w.From, w.To)
			}
			for i, s := range c.steps {
				var got float64
				if v := w.Intake["s accepted"]; v != nil {
					got = *v[i]
				}
				if w.Times[i] != s.end || got != s.value {
					t.Errorf("step %d: ends %d with %v accepted, want %d with %v", i, w.Times[i], got, s.end, s.value)
				}
			}
			if got := w.IntakeTotal["s accepted"]; got != c.total {
				t.Errorf("accepted over the window %v, want %v", got, c.total)
			}
			if got := w.LatencyMean["r"]; math.Abs(got-c.latency) > 1e-9 {
				t.Errorf("mean latency %v ms, want %v", got, c.latency)
			}
		})
	}
}

// A sample's value in the bucket reads back as written; what is not a
// series the console charts is left out.
func TestSampleEncoding(t *testing.T) {
	c := counts{{"intake", "s", "accepted"}: 3, {"latency_sum", "r", ""}: 0.25, {"latency_count", "r", ""}: 2}
	b, err := encodeSample(c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeSample(b)
	if err != nil || !reflect.DeepEqual(got, c) {
		t.Errorf("decoded %v (%v), want %v", got, err, c)
	}
	got, err = decodeSample([]byte(`{"c":[{"k":"gauge","n":"x","v":1},{"k":"intake","n":"s","o":"accepted","v":-2},{"k":"delivery","n":"r","o":"dead","v":1}]}`))
	if want := (counts{{"delivery", "r", "dead"}: 1}); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("decoded %v (%v), want %v", got, err, want)
	}
	if _, err := decodeSample([]byte("not json")); err == nil {
		t.Error("not JSON decoded")
	}
}

// Two samples in one millisecond (a tick, then Stop's) are one: the
// first's increase is not lost under the second's.
func TestSamplesInOneMillisecond(t *testing.T) {
	reg := prometheus.NewRegistry()
	in := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hookgate_inbound_requests_total"}, []string{"source", "outcome"})
	reg.MustRegister(in)
	s := NewStats(reg, StatsConfig{})
	now := time.Now()
	in.WithLabelValues("s", "accepted").Add(3)
	s.Sample(now)
	in.WithLabelValues("s", "accepted").Add(1)
	s.Sample(now)
	s.Sample(now)
	if got := s.Window(time.Hour, time.Minute).IntakeTotal["s accepted"]; got != 4 {
		t.Errorf("accepted %v, want 4", got)
	}
}

// The other gateways' samples are summed per minute as they are read, once
// each, their series kept once: what a console holds is bounded, however
// many gateways and series there are.
func TestStatsBounds(t *testing.T) {
	s := NewStats(prometheus.NewRegistry(), StatsConfig{})
	t0 := int64(1_700_000_100_000) // unix ms, on the 15-minute grid
	acc, ref := key{"intake", "s", "accepted"}, key{"intake", "s", "refused"}
	gateways := maxSamples/(24*60) + 6 // more than a day of maxSamples
	s.mu.Lock()
	for g := range gateways {
		for m := range 24 * 60 {
			at := t0 + int64(m)*minuteMs + 1 + int64(g)*100 // each in its minute
			s.addOther(fmt.Sprintf("gw-%d", g), at, counts{acc: 1, ref: 2}, at)
		}
	}
	s.addOther("gw-0", t0, counts{acc: 1}, t0) // read again: not counted twice
	s.prune()
	if s.nSeen != maxSamples || len(s.keys) != 2 || len(s.others) != 24*60 || s.nSums != 2*24*60 {
		t.Errorf("%d samples counted (want %d), %d series, %d minutes, %d values (want 2, %d, %d)",
			s.nSeen, maxSamples, len(s.keys), len(s.others), s.nSums, 24*60, 2*24*60)
	}
	s.mu.Unlock()
	if got := s.Window(24*time.Hour, 15*time.Minute).IntakeTotal["s accepted"]; got != maxSamples {
		t.Errorf("the day shows %v accepted, want one per sample counted, %d", got, maxSamples)
	}

	// A gateway writing ever new series: maxKeys of them, maxSums values.
	s = NewStats(prometheus.NewRegistry(), StatsConfig{})
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for m := 0; s.nSums < maxSums && m < 24*60; m++ {
		c := counts{}
		for range maxSeries {
			c[key{"intake", fmt.Sprint(n), "accepted"}] = 1
			n++
		}
		at := t0 + int64(m)*minuteMs
		s.addOther("flood", at, c, at)
	}
	for m := range 500 { // a sample of known series each minute
		at := t0 + int64(m)*minuteMs + 1
		s.addOther("more", at, counts{{"intake", "0", "accepted"}: 1}, at)
	}
	if len(s.keys) != maxKeys || s.nSums > maxSums {
		t.Errorf("%d series, %d values; want %d, at most %d", len(s.keys), s.nSums, maxKeys, maxSums)
	}
}

// BenchmarkStatsDayOf34Gateways reads a day of 34 gateways' samples of 70
// series each, as sync does, and reports the heap they hold and the time
// of the charts' two windows.
func BenchmarkStatsDayOf34Gateways(b *testing.B) {
	t0 := int64(1_700_000_100_000)
	c := counts{}
	for i := range 70 {
		c[key{"delivery", fmt.Sprintf("route-%d", i/7), fmt.Sprintf("outcome-%d", i%7)}] = 1
	}
	value, err := encodeSample(c)
	if err != nil {
		b.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := NewStats(prometheus.NewRegistry(), StatsConfig{})
	for g := range 34 {
		gw := fmt.Sprintf("gateway-%d", g)
		for m := range 24 * 60 {
			at := t0 + int64(m)*minuteMs + 1 + int64(g)
			d, err := decodeSample(value)
			if err != nil {
				b.Fatal(err)
			}
			s.mu.Lock()
			s.addOther(gw, at, d, at)
			s.mu.Unlock()
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ResetTimer()
	for range b.N {
		s.Window(time.Hour, time.Minute)
		s.Window(24*time.Hour, 15*time.Minute)
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "MiB-held")
	runtime.KeepAlive(s)
}
