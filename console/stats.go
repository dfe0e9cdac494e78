package console

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/hookgate/hookgate/cluster"
	"github.com/hookgate/hookgate/internal/startstop"
)

// Stats keeps a day of the counters the console charts: intake per source
// and outcome, delivery rounds per route and outcome, attempt durations
// per route. Once a minute it reads this gateway's Prometheus registry and
// keeps the increase since its previous sample (the counters start at 0
// with the process, so the first sample holds what came since the start).
// With Shared (the JetStream KV bucket HOOKGATE_STATS) every sample is
// written there and every gateway's are read back: the charts are the sum
// over the gateways (another gateway's samples are added to per-minute
// sums as they are read), and a restart keeps the day. Without it, or while
// NATS does not answer, they are what this gateway knows.
type Stats struct {
	gather prometheus.Gatherer
	cfg    StatsConfig
	loop   startstop.Loop
	nudge  chan struct{}
	syncMu sync.Mutex // one sync at a time

	mu      sync.Mutex
	last    counts                        // the totals at the previous sample; nil before the first
	series  map[key]uint32                // the series known, each by its index in keys
	keys    []key                         // the series by index
	own     map[int64]values              // this gateway's samples by time (unix ms)
	others  map[int64]values              // the other gateways' samples summed per minute, by its end (unix ms)
	nSums   int                           // the values in others
	seen    map[string]map[int64]struct{} // the other gateways' samples in others, by gateway and time
	nSeen   int                           // the samples in seen
	newest  int64                         // the windows' end, unix ms: the latest sample, none past this gateway's clock
	pending []int64                       // this gateway's samples not yet in Shared, oldest first
	writing int64                         // the sample put is writing; 0 when none
	nudged  time.Time
	warned  time.Time
}

// Shared is where the gateways' samples meet (cluster.StatsBucket).
type Shared interface {
	// Gateway names this gateway's samples.
	Gateway() string
	// Put writes this gateway's sample at.
	Put(ctx context.Context, at time.Time, value []byte) error
	// Read returns the samples written since the previous Read, a bounded
	// part of them: more says there are more to read; anew says that what
	// it held before is gone.
	Read(ctx context.Context) (entries []cluster.StatsEntry, anew, more bool, err error)
}

// StatsConfig configures NewStats; zero values take the stated defaults.
type StatsConfig struct {
	// Every is the sampling interval. Default StatsEvery.
	Every time.Duration
	// Shared, if set, is where every gateway's samples are. Default none:
	// this gateway's, in memory.
	Shared Shared
	// Log takes what goes wrong with Shared. Default: discarded.
	Log *slog.Logger
}

// counts are a sample's values by series.
type counts map[key]float64

// values are a sample's or a minute's values by series (an index in
// Stats.keys).
type values map[uint32]float64

// key names one series: kind is "intake", "delivery", "latency_sum" or
// "latency_count".
type key struct{ kind, name, outcome string }

// StatsEvery is the default sampling interval.
const StatsEvery = time.Minute

const (
	// keepFor is how long a sample is kept: the day and a step.
	keepFor = 24*time.Hour + 15*time.Minute
	// maxSeries bounds a sample's series (routes and sources are the
	// config's; outcomes a few each).
	maxSeries = 2000
	// maxSamples bounds this gateway's samples kept, and the other
	// gateways' counted (a minute's of 34 gateways over keepFor): one
	// more of another gateway's is not counted.
	maxSamples = 50_000
	// maxKeys bounds the series known, every gateway's: one more is not
	// counted.
	maxKeys = 10_000
	// maxSums bounds the values of the other gateways' per-minute sums
	// (a day of 340 series): one more is not counted.
	maxSums = 500_000
	// minuteMs is a minute in ms: the other gateways' samples are summed
	// per minute of the unix time.
	minuteMs = int64(time.Minute / time.Millisecond)
	// aheadSamples is how many sampling intervals past this gateway's
	// clock another's sample may be; one further is skipped.
	aheadSamples = 2
	// nudgeEvery is how often a view of the charts reads Shared at most.
	nudgeEvery = 2 * time.Second
)

// NewStats returns Stats reading g.
func NewStats(g prometheus.Gatherer, cfg StatsConfig) *Stats {
	if cfg.Every <= 0 {
		cfg.Every = StatsEvery
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Stats{gather: g, cfg: cfg, series: map[key]uint32{}, own: map[int64]values{}, others: map[int64]values{},
		seen: map[string]map[int64]struct{}{}, nudge: make(chan struct{}, 1)}
}

// Start samples now and then every interval until Stop, reading and
// writing Shared after each sample and when the charts are viewed.
func (s *Stats) Start(ctx context.Context) error {
	s.Sample(time.Now())
	s.loop.Start(ctx, func(ctx context.Context) {
		s.sync(ctx)
		t := time.NewTicker(s.cfg.Every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				s.Sample(now)
				s.sync(ctx)
			case <-s.nudge:
				s.sync(ctx)
			}
		}
	})
	return nil
}

// Stop stops sampling; Flush takes the last sample.
func (s *Stats) Stop(context.Context) error {
	s.loop.Stop()
	return nil
}

// flushWait bounds Flush's writes.
const flushWait = time.Second

// Flush takes a last sample and writes what is pending to Shared, within
// flushWait (the first failure ends it). Call it after Stop, once what
// the counters count has stopped, before NATS goes.
func (s *Stats) Flush(ctx context.Context) {
	if s.cfg.Shared == nil {
		return
	}
	s.Sample(time.Now())
	// Its own bound: the drain before it may have spent ctx.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushWait)
	defer cancel()
	s.put(ctx)
}

// Sample records the counters' increase since the previous sample.
func (s *Stats) Sample(now time.Time) {
	mfs, err := s.gather.Gather()
	if err != nil && len(mfs) == 0 {
		return
	}
	totals := readTotals(mfs)
	s.mu.Lock()
	defer s.mu.Unlock()
	inc := increase(s.last, totals)
	s.last = totals
	v := s.intern(inc)
	at := now.UnixMilli()
	for prev, ok := s.own[at]; ok; prev, ok = s.own[at] {
		// Two samples in one millisecond are one while it is pending;
		// one written or being written keeps its value (a key is
		// written once), the later sample taking the next millisecond.
		if at != s.writing && slices.Contains(s.pending, at) {
			for k, x := range prev {
				v[k] += x
			}
			s.pending = slices.DeleteFunc(s.pending, func(p int64) bool { return p == at })
			break
		}
		at++
	}
	s.addOwn(at, v, at)
	if s.cfg.Shared != nil {
		s.pending = append(s.pending, at)
		if n := len(s.pending) - int(keepFor/s.cfg.Every) - 1; n > 0 {
			s.pending = s.pending[n:]
		}
	}
	s.prune()
}

func (s *Stats) gateway() string {
	if s.cfg.Shared == nil {
		return ""
	}
	return s.cfg.Shared.Gateway()
}

// readTotals are the totals of the series the console charts, at most
// maxSeries of them.
func readTotals(mfs []*dto.MetricFamily) counts {
	totals := counts{}
	add := func(k key, v float64) {
		if _, ok := totals[k]; ok || len(totals) < maxSeries {
			totals[k] += v
		}
	}
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
				add(key{"intake", label(m, "source"), outcome}, m.GetCounter().GetValue())
			}
		case "hookgate_delivery_rounds_total":
			for _, m := range mf.GetMetric() {
				add(key{"delivery", label(m, "route"), label(m, "outcome")}, m.GetCounter().GetValue())
			}
		case "hookgate_delivery_attempt_duration_seconds":
			for _, m := range mf.GetMetric() {
				h := m.GetHistogram()
				add(key{"latency_sum", label(m, "route"), ""}, h.GetSampleSum())
				add(key{"latency_count", label(m, "route"), ""}, float64(h.GetSampleCount()))
			}
		}
	}
	return totals
}

// increase is each series' increase from prev to cur, the series that did
// not increase left out. A counter lower than before was reset (counted
// again from 0): its increase is its value.
func increase(prev, cur counts) counts {
	out := counts{}
	for k, v := range cur {
		d := v - prev[k]
		if d < 0 {
			d = v
		}
		if d > 0 {
			out[k] = d
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// intern is c by the series' indexes, a series past maxKeys left out.
// Held: mu.
func (s *Stats) intern(c counts) values {
	v := make(values, len(c))
	for k, x := range c {
		if i, ok := s.index(k); ok {
			v[i] += x
		}
	}
	return v
}

// index is k's index in keys, added if new and within maxKeys. Held: mu.
func (s *Stats) index(k key) (uint32, bool) {
	i, ok := s.series[k]
	if !ok && len(s.keys) < maxKeys {
		i, ok = uint32(len(s.keys)), true
		s.series[k] = i
		s.keys = append(s.keys, k)
	}
	return i, ok
}

// addOwn keeps a sample of this gateway's; the windows end at it, or at
// clock (this gateway's time, unix ms) if it is later. Held: mu.
func (s *Stats) addOwn(at int64, v values, clock int64) {
	s.own[at] = v
	s.newest = max(s.newest, min(at, clock))
}

// addOther adds another gateway's sample to the sums of its minute, once
// (a sample counted is skipped), within maxSamples and maxSums; the
// windows end at it, or at clock if it is later. Held: mu.
func (s *Stats) addOther(gateway string, at int64, c counts, clock int64) {
	ats := s.seen[gateway]
	if _, ok := ats[at]; ok || s.nSeen >= maxSamples {
		return
	}
	if ats == nil {
		ats = map[int64]struct{}{}
		s.seen[gateway] = ats
	}
	ats[at] = struct{}{}
	s.nSeen++
	end := ceilTo(at, minuteMs)
	sum := s.others[end]
	if sum == nil {
		sum = values{}
		s.others[end] = sum
	}
	for k, x := range c {
		i, ok := s.index(k)
		if !ok {
			continue
		}
		if _, had := sum[i]; !had {
			if s.nSums >= maxSums {
				continue
			}
			s.nSums++
		}
		sum[i] += x
	}
	s.newest = max(s.newest, min(at, clock))
}

// ceilTo is t rounded up to a multiple of step.
func ceilTo(t, step int64) int64 {
	if r := t % step; r != 0 {
		return t - r + step
	}
	return t
}

// prune drops what is older than keepFor before the windows' end, and
// this gateway's oldest samples past maxSamples. Held: mu.
func (s *Stats) prune() {
	cut := s.newest - keepFor.Milliseconds()
	for at := range s.own {
		if at < cut {
			delete(s.own, at)
		}
	}
	for end, sum := range s.others {
		if end < cut {
			s.nSums -= len(sum)
			delete(s.others, end)
		}
	}
	for gw, ats := range s.seen {
		for at := range ats {
			if at < cut {
				delete(ats, at)
				s.nSeen--
			}
		}
		if len(ats) == 0 {
			delete(s.seen, gw)
		}
	}
	if len(s.own) <= maxSamples {
		return
	}
	ats := slices.Sorted(maps.Keys(s.own))
	for _, at := range ats[:len(ats)-maxSamples] {
		delete(s.own, at)
	}
}

// series is a sample's value as Shared holds it.
type series struct {
	Kind    string  `json:"k"`
	Name    string  `json:"n"`
	Outcome string  `json:"o,omitempty"`
	Value   float64 `json:"v"`
}

var kinds = map[string]bool{"intake": true, "delivery": true, "latency_sum": true, "latency_count": true}

func encodeSample(c counts) ([]byte, error) {
	out := make([]series, 0, len(c))
	for k, v := range c {
		out = append(out, series{k.kind, k.name, k.outcome, v})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Outcome < b.Outcome
	})
	return json.Marshal(struct {
		C []series `json:"c"`
	}{out})
}

// decodeSample reads a value of encodeSample; a series that is none the
// console charts is left out.
func decodeSample(b []byte) (counts, error) {
	var v struct {
		C []series `json:"c"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	if len(v.C) > maxSeries {
		return nil, errors.New("too many series")
	}
	out := counts{}
	for _, s := range v.C {
		if !kinds[s.Kind] || len(s.Name) > 128 || len(s.Outcome) > 64 ||
			math.IsNaN(s.Value) || math.IsInf(s.Value, 0) || s.Value <= 0 {
			continue
		}
		out[key{s.Kind, s.Name, s.Outcome}] += s.Value
	}
	return out, nil
}

// sync reads the samples Shared has that are new here, one bounded read
// after another, and writes this gateway's that it does not have yet
// (also when a read failed, unless NATS is not connected); all of it
// again when Shared was made anew.
func (s *Stats) sync(ctx context.Context) {
	if s.cfg.Shared == nil {
		return
	}
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	var err error
	for more := true; more && err == nil && ctx.Err() == nil; {
		more, err = s.readShared(ctx)
	}
	if err != nil {
		s.warn("console stats: cannot read the gateways' samples; the charts show what this gateway knows", err)
		if errors.Is(err, cluster.ErrStatsNotConnected) {
			return
		}
	}
	s.put(ctx)
}

// readShared makes one read of Shared and keeps what it returned.
func (s *Stats) readShared(ctx context.Context) (more bool, err error) {
	entries, anew, more, err := s.cfg.Shared.Read(ctx)
	// Decoded before the lock: the charts do not wait on it.
	type sample struct {
		gateway string
		at      int64
		c       counts
	}
	now := time.Now()
	clock, ahead := now.UnixMilli(), now.Add(aheadSamples*s.cfg.Every).UnixMilli()
	read := make([]sample, 0, len(entries))
	for _, e := range entries {
		if e.At.UnixMilli() > ahead {
			s.cfg.Log.Debug("console stats: a sample ahead of this gateway's clock skipped", "gateway", e.Gateway, "at", e.At)
			continue
		}
		c, derr := decodeSample(e.Value)
		if derr != nil {
			s.cfg.Log.Debug("console stats: a sample skipped", "gateway", e.Gateway, "err", derr)
			continue
		}
		read = append(read, sample{e.Gateway, e.At.UnixMilli(), c})
	}
	s.mu.Lock()
	gw := s.gateway()
	for _, r := range read {
		if r.gateway != gw {
			s.addOther(r.gateway, r.at, r.c, clock)
		} else if _, ok := s.own[r.at]; !ok { // what this gateway holds is the latest
			s.addOwn(r.at, s.intern(r.c), clock)
		}
	}
	if anew {
		s.requeue()
	}
	s.prune()
	s.mu.Unlock()
	return more, err
}

// requeue queues every sample of this gateway's kept here for Shared
// (made anew: what it held is gone). Held: mu.
func (s *Stats) requeue() {
	queued := map[int64]bool{}
	for _, at := range s.pending {
		queued[at] = true
	}
	for at := range s.own {
		if !queued[at] {
			s.pending = append(s.pending, at)
		}
	}
	slices.Sort(s.pending)
}

// put writes the pending samples to Shared, oldest first, until one
// fails.
func (s *Stats) put(ctx context.Context) {
	for {
		s.mu.Lock()
		if len(s.pending) == 0 {
			s.mu.Unlock()
			return
		}
		at := s.pending[0]
		v, ok := s.own[at]
		c := s.counts(v)
		s.writing = at
		s.mu.Unlock()
		var err error
		if ok {
			var value []byte
			value, err = encodeSample(c)
			if err == nil {
				err = s.cfg.Shared.Put(ctx, time.UnixMilli(at), value)
			}
		}
		s.mu.Lock()
		s.writing = 0
		if err == nil && len(s.pending) > 0 && s.pending[0] == at {
			s.pending = s.pending[1:]
		}
		s.mu.Unlock()
		if err != nil {
			s.warn("console stats: cannot write this gateway's sample; it is written with the next", err)
			return
		}
	}
}

// counts is v by the series' keys. Held: mu.
func (s *Stats) counts(v values) counts {
	c := make(counts, len(v))
	for i, x := range v {
		c[s.keys[i]] = x
	}
	return c
}

// warn logs err, as a warning at most every 5 minutes.
func (s *Stats) warn(msg string, err error) {
	s.mu.Lock()
	now := time.Now()
	ok := now.Sub(s.warned) >= 5*time.Minute
	if ok {
		s.warned = now
	}
	s.mu.Unlock()
	lvl := slog.LevelDebug
	if ok {
		lvl = slog.LevelWarn
	}
	s.cfg.Log.Log(context.Background(), lvl, msg, "err", err)
}

// poke has the loop read Shared soon (at most every nudgeEvery): a view
// of the charts shows what other gateways wrote since the last sample.
func (s *Stats) poke() {
	if s.cfg.Shared == nil {
		return
	}
	s.mu.Lock()
	now := time.Now()
	ok := now.Sub(s.nudged) >= nudgeEvery
	if ok {
		s.nudged = now
	}
	s.mu.Unlock()
	if ok {
		select {
		case s.nudge <- struct{}{}:
		default:
		}
	}
}

// Window is a chart's data over one window: times (unix seconds, each the
// end of a step) and one series per name, each value the count in the
// step ending then (latency: the mean in milliseconds, null without
// attempts).
type Window struct {
	From     int64                 `json:"from"` // unix seconds: the window's start
	To       int64                 `json:"to"`   // and end (the end of the latest sample's step)
	Times    []int64               `json:"times"`
	Intake   map[string][]*float64 `json:"intake"`   // "source outcome"
	Delivery map[string][]*float64 `json:"delivery"` // "route outcome"
	Latency  map[string][]*float64 `json:"latency"`  // route
	// Totals over the window, by the same names.
	IntakeTotal   map[string]float64 `json:"intake_total"`
	DeliveryTotal map[string]float64 `json:"delivery_total"`
	LatencyMean   map[string]float64 `json:"latency_mean_ms"`
}

// Window returns the counts over the last span in steps of step (whole
// minutes), summed over the gateways: steps end on multiples of step
// (unix time), the last one at or after the windows' end; the window
// starts at the step of its earliest sample.
func (s *Stats) Window(span, step time.Duration) Window {
	s.poke()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.window(span, step)
}

// window is Window. Held: mu.
func (s *Stats) window(span, step time.Duration) Window {
	w := Window{Intake: map[string][]*float64{}, Delivery: map[string][]*float64{}, Latency: map[string][]*float64{},
		IntakeTotal: map[string]float64{}, DeliveryTotal: map[string]float64{}, LatencyMean: map[string]float64{}}
	stepMs := max(step.Milliseconds(), 1)
	n := max(int64(span/step), 1)
	if len(s.own) == 0 && len(s.others) == 0 {
		return w
	}
	to := ceilTo(s.newest, stepMs)
	from := to - n*stepMs
	first := n // the earliest step with a sample
	for _, m := range []map[int64]values{s.own, s.others} {
		for at := range m {
			if at > from && at <= to {
				first = min(first, (at-from-1)/stepMs)
			}
		}
	}
	w.From, w.To = from/1000, to/1000
	if first == n {
		return w
	}
	steps := int(n - first)
	per := map[key][]float64{}
	for _, m := range []map[int64]values{s.own, s.others} {
		for at, v := range m {
			if at <= from || at > to {
				continue
			}
			i := (at-from-1)/stepMs - first
			for k, x := range v {
				vs := per[s.keys[k]]
				if vs == nil {
					vs = make([]float64, steps)
					per[s.keys[k]] = vs
				}
				vs[i] += x
			}
		}
	}
	for i := range steps {
		w.Times = append(w.Times, (from+(first+int64(i)+1)*stepMs)/1000)
	}
	w.fill(per)
	return w
}

// fill sets w's series and totals from each series' values per step.
func (w *Window) fill(per map[key][]float64) {
	for k, vs := range per {
		switch k.kind {
		case "intake", "delivery":
			m, total := w.Intake, w.IntakeTotal
			if k.kind == "delivery" {
				m, total = w.Delivery, w.DeliveryTotal
			}
			name := k.name + " " + k.outcome
			for i := range vs {
				m[name] = append(m[name], &vs[i])
				total[name] += vs[i]
			}
		case "latency_count":
			sums := per[key{"latency_sum", k.name, ""}]
			var sum, count float64
			for i, c := range vs {
				var v *float64
				if c > 0 && sums != nil {
					ms := sums[i] / c * 1000
					v = &ms
					sum += sums[i]
					count += c
				}
				w.Latency[k.name] = append(w.Latency[k.name], v)
			}
			if count > 0 {
				w.LatencyMean[k.name] = sum / count * 1000
			}
		}
	}
}
