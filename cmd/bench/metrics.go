package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// walRestarts is the gateway's hookgate_store_wal_restart_seconds
// histogram as scraped at one moment: restarts so far, their total
// duration, and how many took at most each bucket's bound.
type walRestarts struct {
	count   uint64
	sum     float64
	buckets map[float64]uint64
}

// scrapeWALRestarts reads the histogram from the gateway's /metrics.
func scrapeWALRestarts(ctx context.Context, addr string) (walRestarts, error) {
	return scrapeHistogram(ctx, addr, "hookgate_store_wal_restart_seconds")
}

// scrapeHistogram reads a histogram from the gateway's /metrics.
func scrapeHistogram(ctx context.Context, addr, name string) (walRestarts, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return walRestarts{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return walRestarts{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return walRestarts{}, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return walRestarts{}, fmt.Errorf("parse /metrics: %w", err)
	}
	f := fams[name]
	if f == nil || len(f.GetMetric()) == 0 {
		return walRestarts{}, fmt.Errorf("/metrics has no %s", name)
	}
	h := f.GetMetric()[0].GetHistogram()
	w := walRestarts{count: h.GetSampleCount(), sum: h.GetSampleSum(), buckets: map[float64]uint64{}}
	for _, b := range h.GetBucket() {
		w.buckets[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	return w, nil
}

// since is what happened between an earlier scrape and w.
func (w walRestarts) since(before walRestarts) walRestarts {
	d := walRestarts{count: w.count - before.count, sum: w.sum - before.sum, buckets: map[float64]uint64{}}
	for le, n := range w.buckets {
		d.buckets[le] = n - before.buckets[le]
	}
	return d
}

// String says how many restarts there were, their mean, and the smallest
// bucket bound that holds the longest.
func (w walRestarts) String() string {
	if w.count == 0 {
		return "none"
	}
	longest := math.Inf(1)
	for le, n := range w.buckets {
		if n == w.count && le < longest {
			longest = le
		}
	}
	bound := "over the largest bucket"
	if !math.IsInf(longest, 1) {
		bound = "≤ " + ms(time.Duration(longest*float64(time.Second)))
	}
	return fmt.Sprintf("%d, mean %s, longest %s", w.count,
		ms(time.Duration(w.sum/float64(w.count)*float64(time.Second))), bound)
}
