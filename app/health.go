package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

// registerOps mounts the operational endpoints, none of which takes the
// API token: GET /healthz, GET /readyz (this gateway takes events and
// they leave its outbox: what a load balancer probes), GET /readyz/delivery (the events it takes reach
// NATS and its routes' consumers) and GET /metrics (behind metrics.token
// when set).
func (a *App) registerOps(r fiber.Router) {
	probe := &writeProbe{
		write: func(ctx context.Context) error {
			return a.store.SetMeta(ctx, "readyz_write_probe", time.Now().UTC().Format(time.RFC3339Nano))
		},
		every:   readyWriteEvery,
		timeout: readyTimeout,
	}
	r.Get("/healthz", func(c *fiber.Ctx) error { return c.JSON(fiber.Map{"status": "ok"}) })
	r.Get("/readyz", func(c *fiber.Ctx) error {
		ctx, cancel := context.WithTimeout(c.UserContext(), readyTimeout)
		defer cancel()
		// The outbox's age too: a gateway whose events have not reached
		// the broker for nats.outbox_max_age (60s: far longer than a NATS
		// leader election) stores events that go nowhere.
		checks := []check{
			result("store", probe.check(ctx)),
			result("shutdown", a.stoppingErr()),
			result("outbox", a.outboxAge.check(a.cfg.NATS.OutboxMaxAge)),
		}
		return writeChecks(c, checks, nil, "ready", "not_ready")
	})
	// Requests at once share a run of the checks (a few JetStream API
	// requests each, on the connection that publishes): the endpoint takes
	// no token. A request waits at most readyTimeout for a run that started
	// after it came.
	delivery := &coalesced[deliveryAnswer]{wait: readyTimeout, run: func() deliveryAnswer {
		ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
		defer cancel()
		checks, routes := a.deliveryChecks(ctx)
		return deliveryAnswer{checks, routes}
	}}
	r.Get("/readyz/delivery", func(c *fiber.Ctx) error {
		ans := delivery.get()
		return writeChecks(c, ans.checks, ans.routes, "delivering", "not_delivering")
	})
	r.Get("/metrics", a.metricsHandler())
	b := a.broker
	a.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "hookgate_nats_connected",
		Help: "1 while the gateway is connected to NATS, else 0 (the nats check of /readyz/delivery).",
	}, func() float64 {
		if nc := b.Conn(); nc != nil && nc.IsConnected() {
			return 1
		}
		return 0
	}))
}

const (
	// readyWriteEvery is how often /readyz really writes to SQLite; in
	// between it answers with the last write's outcome.
	readyWriteEvery = 5 * time.Second
	// readyTimeout bounds each check.
	readyTimeout = 2 * time.Second
)

// check is one line of a /readyz or /readyz/delivery answer.
type check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Reason string `json:"reason,omitempty"`
}

func result(name string, err error) check {
	ch := check{Name: name, OK: err == nil}
	if err != nil {
		ch.Reason = err.Error()
	}
	return ch
}

// deliveryAnswer is a run of /readyz/delivery's checks.
type deliveryAnswer struct {
	checks []check
	routes []routeState
}

// routeState is a route's delivery state in a /readyz/delivery answer
// (detail only: a paused route does not fail it).
type routeState struct {
	Name  string `json:"name"`
	State string `json:"state"`
}

// writeChecks answers 200 with status ok when every check passed, else 503 with
// status failed; the body lists every check with the reason of each
// failure.
func writeChecks(c *fiber.Ctx, checks []check, routes []routeState, ok, failed string) error {
	status, code := ok, http.StatusOK
	for _, ch := range checks {
		if !ch.OK {
			status, code = failed, http.StatusServiceUnavailable
			break
		}
	}
	body := fiber.Map{"status": status, "checks": checks}
	if routes != nil {
		body["routes"] = routes
	}
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.Status(code).JSON(body)
}

// stoppingErr fails once the gateway has begun to stop.
func (a *App) stoppingErr() error {
	if a.stopping.Load() {
		return errors.New("shutting down: no longer taking events")
	}
	return nil
}

// deliveryChecks are /readyz/delivery's: the outbox's oldest event is at
// most nats.outbox_max_age old, NATS is connected, the events stream
// exists (and, embedded, is healthy) and so does every route's consumer;
// in cluster mode, the KV buckets and the records stream answer.
func (a *App) deliveryChecks(ctx context.Context) ([]check, []routeState) {
	var checks []check
	add := func(name string, err error) { checks = append(checks, result(name, err)) }
	add("outbox", a.outboxAge.check(a.cfg.NATS.OutboxMaxAge))

	b := a.broker
	consumers := a.engine.Consumers()
	names := make([]string, 0, len(consumers))
	for name := range consumers {
		names = append(names, name)
	}
	sort.Strings(names)
	skip := func(streamErr error, why string) {
		add("stream", streamErr)
		for _, name := range names {
			add("consumer "+name, errors.New(why))
		}
	}
	if nc := b.Conn(); nc == nil || !nc.IsConnected() {
		status := "closed"
		if nc != nil {
			status = nc.Status().String()
			if authRefused(nc.LastError()) {
				status += ": the server refused the credentials (nats.url, nats.credentials)"
			}
		}
		add("nats", fmt.Errorf("not connected (%s)", status))
		skip(errors.New("nats not connected"), "nats not connected")
		a.clusterChecks(ctx, add, errors.New("nats not connected"))
		return checks, nil
	}
	add("nats", nil)
	stream, err := b.JetStream().Stream(ctx, b.Stream())
	if err != nil {
		skip(fmt.Errorf("stream %s: %w", b.Stream(), err), "no stream")
		a.clusterChecks(ctx, add, nil)
		return checks, nil
	}
	add("stream", b.StreamHealth())
	present := map[string]bool{}
	lister := stream.ConsumerNames(ctx)
	for n := range lister.Name() {
		present[n] = true
	}
	listErr := lister.Err()
	for _, name := range names {
		switch {
		case present[consumers[name]]:
			add("consumer "+name, nil)
		case listErr != nil:
			add("consumer "+name, fmt.Errorf("consumers not listed: %w", listErr))
		default:
			add("consumer "+name, fmt.Errorf("consumer %s not found", consumers[name]))
		}
	}
	a.clusterChecks(ctx, add, nil)
	var routes []routeState
	for _, st := range a.engine.RouteStates() {
		routes = append(routes, routeState{Name: st.Name, State: st.State})
	}
	return checks, routes
}

// clusterChecks adds, in cluster mode, a check of each KV bucket and of
// the records stream: it answers (found, its stream has a leader) within
// the probe's bound; failed with skipped when set. The checks run
// together: one stream without a leader does not use up the others'
// time.
func (a *App) clusterChecks(ctx context.Context, add func(string, error), skipped error) {
	if a.claims == nil || a.deliveries == nil {
		return
	}
	type clusterCheck struct {
		name  string
		check func(context.Context) error
		err   error
	}
	checks := []*clusterCheck{{name: "cluster claims", check: a.claims.Check}, {name: "cluster deliveries", check: a.deliveries.Check}}
	if a.pauses != nil {
		checks = append(checks, &clusterCheck{name: "cluster pauses", check: a.pauses.Check})
	}
	if a.records != nil {
		checks = append(checks, &clusterCheck{name: "cluster records", check: a.records.Check})
	}
	if a.takes != nil {
		checks = append(checks, &clusterCheck{name: "cluster takes", check: a.takes.Check})
	}
	var wg sync.WaitGroup
	for _, c := range checks {
		if c.err = skipped; skipped == nil {
			wg.Go(func() { c.err = c.check(ctx) })
		}
	}
	wg.Wait()
	for _, c := range checks {
		add(c.name, c.err)
	}
}

// outboxAge reads how long the oldest event in the outbox has waited for
// JetStream's ack, at most once per outboxAgeCacheFor.
type outboxAge struct {
	read func(context.Context) (time.Time, bool, error)

	mu     sync.Mutex
	readAt time.Time
	oldest time.Time // zero: the outbox is empty
	err    error
}

// outboxAgeCacheFor is how long a read of the oldest outbox event is used.
const outboxAgeCacheFor = time.Second

// get returns the age of the oldest event in the outbox (0 when empty).
func (o *outboxAge) get() (time.Duration, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.readAt.IsZero() || time.Since(o.readAt) >= outboxAgeCacheFor {
		ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
		at, ok, err := o.read(ctx)
		cancel()
		o.readAt, o.err = time.Now(), err
		if err == nil {
			o.oldest = time.Time{}
			if ok {
				o.oldest = at
			}
		}
	}
	if o.err != nil {
		return 0, o.err
	}
	if o.oldest.IsZero() {
		return 0, nil
	}
	return max(time.Since(o.oldest), 0), nil
}

// seconds is get for the gauge: the last known age on a failed read.
func (o *outboxAge) seconds() float64 {
	age, _ := o.get()
	return age.Seconds()
}

// check fails when the oldest unpublished event is older than limit.
func (o *outboxAge) check(limit time.Duration) error {
	age, err := o.get()
	if err != nil {
		return fmt.Errorf("oldest unpublished event not read: %w", err)
	}
	if age > limit {
		return fmt.Errorf("the oldest unpublished event is %s old (nats.outbox_max_age %s): the broker is not taking writes",
			age.Round(time.Second), limit)
	}
	return nil
}

// writeProbe checks that SQLite commits a write, through the store's
// writer: at most one real write per interval, whose outcome answers the
// checks in between. A write that does not commit within timeout fails the
// check while it waits.
type writeProbe struct {
	write          func(context.Context) error
	every, timeout time.Duration

	mu      sync.Mutex
	at      time.Time // when the last write finished
	err     error     // its outcome
	running chan struct{}
	started time.Time
}

func (p *writeProbe) check(ctx context.Context) error {
	p.mu.Lock()
	if p.running == nil && (p.at.IsZero() || time.Since(p.at) >= p.every) {
		done := make(chan struct{})
		p.running, p.started = done, time.Now()
		// The write outlives the check that starts it: its outcome answers
		// the checks that follow, so the request's end must not cancel it.
		go func() { //nolint:gosec // G118: detached on purpose (above); bounded by its own timeout
			wctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			err := p.write(wctx)
			cancel()
			p.mu.Lock()
			p.at, p.err, p.running = time.Now(), err, nil
			p.mu.Unlock()
			close(done)
		}()
	}
	done, started, last := p.running, p.started, p.err
	p.mu.Unlock()
	if done == nil {
		return wrapStoreErr(last)
	}
	t := time.NewTimer(max(p.timeout-time.Since(started), 0))
	defer t.Stop()
	select {
	case <-done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return wrapStoreErr(p.err)
	case <-t.C:
		return fmt.Errorf("a test write has not committed after %s", time.Since(started).Round(time.Millisecond))
	case <-ctx.Done():
		return fmt.Errorf("a test write has not committed after %s", time.Since(started).Round(time.Millisecond))
	}
}

func wrapStoreErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("not writable: %w", err)
}

// authRefused reports whether err is NATS refusing the connection's
// credentials. Other errors are not told: the answer is unauthenticated,
// and theirs may name hosts.
func authRefused(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired)
}
