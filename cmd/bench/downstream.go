package main

import (
	"hash/maphash"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// downstream is the fast local receiver the gateway's route delivers to. It
// answers 200 at once and counts distinct events (by X-Hookgate-Event-Id)
// and the requests for each.
type downstream struct {
	srv  *fasthttp.Server
	ln   net.Listener
	seed maphash.Seed

	requests atomic.Int64 // every request, redeliveries included
	distinct atomic.Int64 // distinct events
	first    atomic.Int64 // unix nanos of the first distinct delivery
	last     atomic.Int64 // unix nanos of the latest new distinct delivery

	shards [64]struct {
		sync.Mutex
		seen map[string]uint32 // requests per event
	}
}

// downstreamDelay is how long the downstream waits before each answer
// (-downstream-delay): delivery lags intake once the route's concurrency
// over it is below the intake rate.
var downstreamDelay time.Duration

func startDownstream() (*downstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	d := &downstream{ln: ln, seed: maphash.MakeSeed()}
	for i := range d.shards {
		d.shards[i].seen = make(map[string]uint32)
	}
	d.srv = &fasthttp.Server{
		Handler:               d.handle,
		Name:                  "bench-downstream",
		ReadTimeout:           time.Minute,
		IdleTimeout:           2 * time.Minute,
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
	}
	go func() {
		if err := d.srv.Serve(ln); err != nil {
			logf("downstream: %v", err)
		}
	}()
	return d, nil
}

func (d *downstream) url() string { return "http://" + d.ln.Addr().String() + "/hook" }

func (d *downstream) handle(c *fasthttp.RequestCtx) {
	if downstreamDelay > 0 {
		time.Sleep(downstreamDelay)
	}
	d.requests.Add(1)
	id := c.Request.Header.Peek("X-Hookgate-Event-Id")
	if len(id) > 0 {
		s := &d.shards[maphash.Bytes(d.seed, id)%uint64(len(d.shards))]
		s.Lock()
		n := s.seen[string(id)]
		s.seen[string(id)] = n + 1
		s.Unlock()
		seen := n > 0
		if !seen {
			now := time.Now().UnixNano()
			d.first.CompareAndSwap(0, now)
			d.distinct.Add(1)
			for l := d.last.Load(); l < now && !d.last.CompareAndSwap(l, now); l = d.last.Load() {
			}
		}
	}
	c.SetStatusCode(fasthttp.StatusOK)
	c.SetBodyString("ok")
}

func (d *downstream) close() {
	if err := d.srv.Shutdown(); err != nil {
		logf("downstream: %v", err)
	}
}

// reset clears the counts (not the events seen).
func (d *downstream) reset() {
	d.requests.Store(0)
	d.distinct.Store(0)
	d.first.Store(0)
	d.last.Store(0)
}

// doubled is the number of events the downstream was sent more than once.
// Each answer was 200, so each such event was delivered twice; with one
// route, under one Idempotency-Key (route, event).
func (d *downstream) doubled() int64 {
	var n int64
	for i := range d.shards {
		s := &d.shards[i]
		s.Lock()
		for _, c := range s.seen {
			if c > 1 {
				n++
			}
		}
		s.Unlock()
	}
	return n
}

// missing is the number of these event IDs the downstream never saw.
func (d *downstream) missing(ids map[string]struct{}) int64 {
	var n int64
	for id := range ids {
		s := &d.shards[maphash.String(d.seed, id)%uint64(len(d.shards))]
		s.Lock()
		_, ok := s.seen[id]
		s.Unlock()
		if !ok {
			n++
		}
	}
	return n
}
