package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// benchSecret is the Stripe signing secret of the generated config.
const benchSecret = "whsec_hookgate_bench_secret" //nolint:gosec // G101: the bench's own secret, in the config it writes

// eventTypes are spread over the events (so the stream has a few subjects).
var eventTypes = []string{"invoice.paid", "customer.created", "payment_intent.succeeded", "charge.refunded"}

// loader drives one HTTP server (or several: newSpreadLoader) with
// Stripe-signed events over a fixed number of keep-alive connections.
type loader struct {
	addr    string
	conns   int
	size    int                    // body bytes
	repeat  float64                // share of requests that repeat an earlier event
	tag     string                 // makes event IDs unique to this run
	random  bool                   // event IDs are random, not counted per sender
	track   bool                   // keep each request's due time and latency, in order (result.at, latAll)
	client  *fasthttp.HostClient   // the first target's
	clients []*fasthttp.HostClient // one per target (gateway)
	workers []*worker

	// With several targets (newSpreadLoader): the IDs each worker sent,
	// from which any worker draws its repeats, so that a repeat can go to
	// another target than its first copy.
	pool []poolShard

	// Counters over the loader's whole life.
	accepted, duplicate, failed atomic.Int64
	repeats, crossRepeats       atomic.Int64 // repeats sent (with a pool), and of them to another target than the first copy
	firstAccepted               atomic.Int64 // unix nanos of the first accepted answer
	lastErr                     atomic.Value // string
}

// poolShard is one worker's sent IDs, read by every worker.
type poolShard struct {
	mu  sync.Mutex
	ids []pooled
}

// pooled is an event ID sent and the target its first copy went to.
type pooled struct {
	id     string
	target int
}

func newLoader(addr string, conns, size int, repeat float64, tag string) *loader {
	l := &loader{
		addr:  addr,
		conns: conns, size: size, repeat: repeat, tag: tag,
		client: newHostClient(addr, conns),
	}
	l.clients = []*fasthttp.HostClient{l.client}
	for i := range conns {
		l.workers = append(l.workers, newWorker(l, i, l.client, 0))
	}
	return l
}

// newSpreadLoader spreads its connections over the addresses, round-robin
// (connection i goes to addrs[i % len(addrs)]), and draws repeats from the
// IDs every connection sent: with n targets, (n-1)/n of the repeats go to
// another target than the first copy. It keeps the IDs answered accepted
// (acceptedIDs).
func newSpreadLoader(addrs []string, conns, size int, repeat float64, tag string) *loader {
	l := &loader{
		addr:  addrs[0],
		conns: conns, size: size, repeat: repeat, tag: tag,
		pool: make([]poolShard, conns),
	}
	for i, a := range addrs {
		l.clients = append(l.clients, newHostClient(a, (conns-i+len(addrs)-1)/len(addrs)))
	}
	l.client = l.clients[0]
	for i := range conns {
		t := i % len(addrs)
		l.workers = append(l.workers, newWorker(l, i, l.clients[t], t))
	}
	return l
}

func newHostClient(addr string, conns int) *fasthttp.HostClient {
	return &fasthttp.HostClient{
		Addr:                addr,
		Name:                "hookgate-bench",
		MaxConns:            max(conns, 1),
		MaxConnWaitTimeout:  30 * time.Second,
		MaxIdleConnDuration: time.Minute,
		ReadTimeout:         60 * time.Second,
		WriteTimeout:        60 * time.Second,
		ReadBufferSize:      4096,
		WriteBufferSize:     4096,
	}
}

func newWorker(l *loader, i int, c *fasthttp.HostClient, target int) *worker {
	return &worker{
		l: l, id: i, client: c, target: target, url: "http://" + c.Addr + "/webhooks/stripe",
		rng: rand.New(rand.NewPCG(uint64(i)+1, 0x9e3779b97f4a7c15)),
		mac: hmac.New(sha256.New, []byte(benchSecret)),
	}
}

// closeIdle closes the idle connections to every target.
func (l *loader) closeIdle() {
	for _, c := range l.clients {
		c.CloseIdleConnections()
	}
}

// acceptedIDs is the set of event IDs answered accepted (by any target),
// with a spread loader; call it while no phase runs.
func (l *loader) acceptedIDs() map[string]struct{} {
	ids := map[string]struct{}{}
	for _, w := range l.workers {
		for _, id := range w.acceptedIDs {
			ids[id] = struct{}{}
		}
	}
	return ids
}

// result is what one phase measured.
type result struct {
	elapsed                     time.Duration
	accepted, duplicate, failed int64
	lat                         []uint32 // microseconds, sorted
	// With loader.track: every request's due time since the start (ms)
	// and its latency (µs; failedLat if it failed), pairwise.
	at, latAll []uint32
}

// failedLat is the latency of a failed request in result.latAll.
const failedLat = 1<<32 - 1

func (r result) ok() int64 { return r.accepted + r.duplicate }

// rate is successful answers per second.
func (r result) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ok()) / r.elapsed.Seconds()
}

// pct returns the p-th percentile latency (0 < p < 100).
func (r result) pct(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	i := int(float64(len(r.lat))*p/100+0.5) - 1
	i = min(max(i, 0), len(r.lat)-1)
	return time.Duration(r.lat[i]) * time.Microsecond
}

// closedLoop runs every worker back to back (each sends its next request
// when the previous one is answered) for d, and measures every request.
func (l *loader) closedLoop(ctx context.Context, d time.Duration) result {
	return l.run(ctx, d, 0)
}

// openLoop sends rate requests per second for d on a fixed schedule and
// measures each latency from the moment its request was due (so a stall
// counts against every request it delays: no coordinated omission).
func (l *loader) openLoop(ctx context.Context, d time.Duration, rate float64) result {
	return l.run(ctx, d, rate)
}

func (l *loader) run(ctx context.Context, d time.Duration, rate float64) result {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	a0, d0, f0 := l.accepted.Load(), l.duplicate.Load(), l.failed.Load()
	start := time.Now()
	var next atomic.Int64
	var interval time.Duration
	if rate > 0 {
		interval = time.Duration(float64(time.Second) / rate)
	}
	var wg sync.WaitGroup
	for _, w := range l.workers {
		w.lat, w.at, w.latAll = w.lat[:0], w.at[:0], w.latAll[:0]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				var due time.Time
				if rate > 0 {
					due = start.Add(time.Duration(next.Add(1)-1) * interval)
					if wait := time.Until(due); wait > 0 {
						t := time.NewTimer(wait)
						select {
						case <-ctx.Done():
							t.Stop()
							return
						case <-t.C:
						}
					}
				} else {
					due = time.Now()
				}
				ok := w.send()
				lat := uint32(min(time.Since(due).Microseconds(), failedLat-1))
				if ok {
					w.lat = append(w.lat, lat)
				}
				if l.track {
					if !ok {
						lat = failedLat
					}
					w.at = append(w.at, uint32(due.Sub(start).Milliseconds()))
					w.latAll = append(w.latAll, lat)
				}
			}
		}()
	}
	wg.Wait()
	r := result{elapsed: time.Since(start),
		accepted: l.accepted.Load() - a0, duplicate: l.duplicate.Load() - d0, failed: l.failed.Load() - f0}
	for _, w := range l.workers {
		r.lat = append(r.lat, w.lat...)
		r.at = append(r.at, w.at...)
		r.latAll = append(r.latAll, w.latAll...)
	}
	slices.Sort(r.lat)
	return r
}

// worker is one connection's sender.
type worker struct {
	l      *loader
	id     int
	client *fasthttp.HostClient
	url    string
	target int // index of its client in l.clients
	rng    *rand.Rand
	mac    hash.Hash
	n      int      // events generated
	recent []string // IDs sent, for repeats
	body   []byte
	hdr    []byte
	lat    []uint32
	at     []uint32 // with loader.track
	latAll []uint32
	req    *fasthttp.Request
	resp   *fasthttp.Response

	acceptedIDs []string // with a pool: the IDs answered accepted
	answered    int64    // answers accepted or duplicate
}

// randomID is an event ID of 24 random base-62 characters after "evt_",
// random as providers' IDs are (GitHub's are UUIDs): each lands at a
// random place in the store's unique indexes, where counted IDs append
// near a few hot places.
func randomID(rng *rand.Rand) string {
	const digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	var b [4 + 24]byte
	copy(b[:], "evt_")
	for i := 4; i < len(b); i++ {
		b[i] = digits[rng.IntN(len(digits))]
	}
	return string(b[:])
}

var (
	answerAccepted  = []byte(`"status":"accepted"`)
	answerDuplicate = []byte(`"status":"duplicate"`)
)

// send posts one event (a new one, or with probability repeat one sent
// before, signed afresh as a provider's retry is) and reports whether it
// was answered 200.
func (w *worker) send() bool {
	if w.req == nil {
		w.req, w.resp = fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		w.req.SetRequestURI(w.url)
		w.req.Header.SetMethod(fasthttp.MethodPost)
		w.req.Header.SetContentType("application/json")
	}
	id := w.nextID()
	w.body = appendEvent(w.body[:0], id, w.l.size)
	w.hdr = w.sign(w.hdr[:0], time.Now().Unix(), w.body)
	w.req.Header.SetBytesV("Stripe-Signature", w.hdr)
	w.req.SetBodyRaw(w.body)
	w.resp.Reset()
	err := w.client.Do(w.req, w.resp)
	switch {
	case err != nil:
		w.l.failed.Add(1)
		w.l.lastErr.Store(err.Error())
		return false
	case w.resp.StatusCode() != fasthttp.StatusOK:
		w.l.failed.Add(1)
		w.l.lastErr.Store(strconv.Itoa(w.resp.StatusCode()) + " " + string(w.resp.Body()))
		return false
	}
	w.answered++
	switch {
	case bytes.Contains(w.resp.Body(), answerAccepted):
		if w.l.accepted.Add(1) == 1 {
			w.l.firstAccepted.CompareAndSwap(0, time.Now().UnixNano())
		}
		if w.l.pool != nil {
			w.acceptedIDs = append(w.acceptedIDs, id)
		}
	case bytes.Contains(w.resp.Body(), answerDuplicate):
		w.l.duplicate.Add(1)
	default: // the bare server answers 200 with its own body
		w.l.accepted.Add(1)
	}
	return true
}

// nextID is the ID of the next event: with probability repeat one sent
// before (by this worker, or with a pool by any worker), else a new one.
func (w *worker) nextID() string {
	if w.l.pool != nil {
		return w.nextPooled()
	}
	if len(w.recent) > 0 && w.rng.Float64() < w.l.repeat {
		return w.recent[w.rng.IntN(len(w.recent))]
	}
	id := w.newID()
	if len(w.recent) < 4096 {
		w.recent = append(w.recent, id)
	} else {
		w.recent[w.rng.IntN(len(w.recent))] = id
	}
	return id
}

// nextPooled is nextID drawing repeats from every worker's IDs: a random
// worker's, then a random one of the up to 4,096 it keeps (replaced at
// random once full), as nextID keeps its own.
func (w *worker) nextPooled() string {
	if w.n > 0 && w.rng.Float64() < w.l.repeat {
		sh := &w.l.pool[w.rng.IntN(len(w.l.pool))]
		sh.mu.Lock()
		var p pooled
		ok := len(sh.ids) > 0
		if ok {
			p = sh.ids[w.rng.IntN(len(sh.ids))]
		}
		sh.mu.Unlock()
		if ok {
			w.l.repeats.Add(1)
			if p.target != w.target {
				w.l.crossRepeats.Add(1)
			}
			return p.id
		}
	}
	id := w.newID()
	sh := &w.l.pool[w.id]
	sh.mu.Lock()
	if len(sh.ids) < 4096 {
		sh.ids = append(sh.ids, pooled{id, w.target})
	} else {
		sh.ids[w.rng.IntN(len(sh.ids))] = pooled{id, w.target}
	}
	sh.mu.Unlock()
	return id
}

// newID is a new event ID: random, or counted per worker.
func (w *worker) newID() string {
	var id string
	if w.l.random {
		id = randomID(w.rng)
	} else {
		id = "evt_" + w.l.tag + strconv.Itoa(w.id) + "x" + strconv.Itoa(w.n)
	}
	w.n++
	return id
}

// sign appends the Stripe-Signature value for body signed at ts.
func (w *worker) sign(dst []byte, ts int64, body []byte) []byte {
	var sum [sha256.Size]byte
	var tsb [24]byte
	w.mac.Reset()
	w.mac.Write(append(strconv.AppendInt(tsb[:0], ts, 10), '.'))
	w.mac.Write(body)
	dst = append(dst, "t="...)
	dst = strconv.AppendInt(dst, ts, 10)
	dst = append(dst, ",v1="...)
	return hex.AppendEncode(dst, w.mac.Sum(sum[:0]))
}

// idHash seeds the fields appendEvent derives from an event's ID.
func idHash(id string) uint64 {
	h := uint64(0)
	for i := 0; i < len(id); i++ {
		h = h*131 + uint64(id[i])
	}
	return h
}

// eventType is the type appendEvent gives the event with this ID.
func eventType(id string) string { return eventTypes[idHash(id)%uint64(len(eventTypes))] }

// appendEvent appends a Stripe-shaped event with this ID, padded to size
// bytes (at least about 330: the fields come first). The same ID always
// gives the same body (a retry resends it).
func appendEvent(dst []byte, id string, size int) []byte {
	start := len(dst)
	h := idHash(id)
	dst = append(dst, `{"id":"`...)
	dst = append(dst, id...)
	dst = append(dst, `","object":"event","api_version":"2024-06-20","created":`...)
	dst = strconv.AppendUint(dst, 1700000000+h%100000000, 10)
	dst = append(dst, `,"type":"`...)
	dst = append(dst, eventType(id)...)
	dst = append(dst, `","livemode":false,"pending_webhooks":1,"request":{"id":null,"idempotency_key":null},`...)
	dst = append(dst, `"data":{"object":{"id":"in_`...)
	dst = strconv.AppendUint(dst, h, 36)
	dst = append(dst, `","object":"invoice","currency":"usd","amount_due":`...)
	dst = strconv.AppendUint(dst, h%100000, 10)
	dst = append(dst, `,"customer":"cus_`...)
	dst = strconv.AppendUint(dst, h%1000003, 36)
	dst = append(dst, `","description":"`...)
	const tail = `"}}}`
	const pad = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor. "
	for n := size - (len(dst) - start) - len(tail); n > 0; n -= len(pad) {
		dst = append(dst, pad[:min(n, len(pad))]...)
	}
	return append(dst, tail...)
}
