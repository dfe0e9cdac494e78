// Package app wires hookgate together. Start runs the ordered start-up steps
// (store, broker, outbox relay, deliveries, retention, HTTP), each returning
// an error and recording the service it started; Stop stops those in
// reverse within the caller's deadline. The services never see package
// config: translate.go turns the file into each one's own Config.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/hookgate/hookgate/admin"
	"github.com/hookgate/hookgate/alert"
	"github.com/hookgate/hookgate/cluster"
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/console"
	"github.com/hookgate/hookgate/egress"
	"github.com/hookgate/hookgate/httperror"
	"github.com/hookgate/hookgate/inbound"
	"github.com/hookgate/hookgate/internal/startstop"
	"github.com/hookgate/hookgate/jetstream"
	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/relay"
	"github.com/hookgate/hookgate/store"
	"github.com/hookgate/hookgate/tasks"
)

// Version is the gateway's version, set at build time with
// -ldflags "-X github.com/hookgate/hookgate/app.Version=…".
var Version = "dev"

// App is a running gateway.
type App struct {
	cfg *config.Config
	log *slog.Logger

	Registry *prometheus.Registry

	store  *store.Store
	broker *jetstream.Broker
	relay  *relay.Relay
	engine *outbound.Engine
	egress *egress.Policy
	claims *cluster.Claims // cluster mode only
	// consoleStats samples the counters the console charts, which are
	// registered in consoleReg as well as in Registry.
	consoleStats *console.Stats
	consoleReg   *prometheus.Registry
	// deliveries is the cluster delivery state (cluster mode only).
	deliveries *cluster.DeliveryState
	// alerts is nil without alerts.url.
	alerts *alert.Alerter

	records *cluster.Records // cluster mode only: every gateway's records into this store
	pauses  *cluster.Pauses  // cluster mode only: operators' pauses on every gateway
	takes   *cluster.Takes   // cluster mode only: what every gateway's routes take

	egressOptions []egress.Option // for tests: a resolver
	inbound       *inbound.Handler
	http          *fiber.App
	ln            net.Listener
	conns         *connListener
	served        chan error
	pruner        *store.Pruner
	outboxAge     *outboxAge
	stopping      atomic.Bool // /readyz fails once set

	running  []service // started, in order; Stop stops them in reverse
	stopOnce sync.Once
	stopErr  error
}

// service is a started service, by the name its Stop error carries.
type service struct {
	name string
	svc  startstop.Stopper
}

// started records that the start-up started s: Stop stops it.
func (a *App) started(name string, s startstop.Stopper) {
	a.running = append(a.running, service{name, s})
}

// New returns an App for cfg; Start runs it.
func New(cfg *config.Config, log *slog.Logger) *App {
	return &App{cfg: cfg, log: log, Registry: newRegistry()}
}

// WithEgressOptions sets options of the task egress policy (tests use it to
// inject a resolver). Call before Start.
func (a *App) WithEgressOptions(opts ...egress.Option) *App {
	a.egressOptions = opts
	return a
}

// Run starts the gateway, serves until ctx is done, then stops it within
// cfg.ShutdownTimeout.
func Run(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	setMemoryLimit(cfg, log)
	a := New(cfg, log)
	if err := a.Start(ctx); err != nil {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
		defer cancel()
		return errors.Join(err, a.Stop(stopCtx))
	}
	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "timeout", cfg.ShutdownTimeout)
	case serveErr = <-a.served:
		log.Error("http server stopped", "err", serveErr)
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	return errors.Join(serveErr, a.Stop(stopCtx))
}

// Start runs the start-up steps in order. On error, call Stop to stop what
// was started.
func (a *App) Start(ctx context.Context) error {
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"open store", a.openStore},
		{"connect jetstream", a.connectBroker},
		{"ready console stats' last sample", a.readyConsoleFlush},
		{"check max_body against the broker", a.checkPayload},
		{"ready cluster claims", a.startClaims},
		{"start cluster records", a.startRecords},
		{"ready cluster pauses", a.newPauses},
		{"ready cluster takes", a.newTakes},
		{"start alerts", a.startAlerts},
		{"build deliveries", a.buildEngine},
		{"ready cluster delivery state", a.ensureDeliveries},
		{"start cluster pauses", a.startPauses},
		{"start cluster takes", a.startTakes},
		{"start outbox relay", a.startRelay},
		{"start deliveries", a.startEngine},
		{"start retention", a.startRetention},
		{"start http", a.startHTTP},
		{"start console stats", a.startConsoleStats},
	}
	for _, s := range steps {
		if err := s.fn(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	a.log.Info("hookgate started", "version", Version, "listen", a.Addr(),
		"sources", len(a.cfg.Sources), "nats", natsMode(a.cfg))
	return nil
}

func natsMode(cfg *config.Config) string {
	if cfg.NATS.URL == "" {
		return "embedded"
	}
	return "external"
}

func (a *App) openStore(ctx context.Context) error {
	batches := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "hookgate_store_commit_batch_size",
		Help:    "Writes per group-commit transaction.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 11),
	})
	restarts := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "hookgate_store_wal_restart_seconds",
		Help:    "How long each RESTART checkpoint held up writes (one that found readers and gave up is counted too).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 12),
	})
	a.Registry.MustRegister(batches, restarts)
	sc := storeConfig(a.cfg.Store)
	sc.OnCommit = func(n int) { batches.Observe(float64(n)) }
	sc.OnWALRestart = func(d time.Duration) { restarts.Observe(d.Seconds()) }
	s, err := store.Open(ctx, sc, a.log.With("component", "store"))
	if err != nil {
		return err
	}
	a.store = s
	a.started("store", s)
	a.outboxAge = &outboxAge{read: s.OutboxOldest}
	return nil
}

func (a *App) connectBroker(ctx context.Context) error {
	b := jetstream.New(brokerConfig(a.cfg.NATS), a.log.With("component", "jetstream"))
	if err := b.Start(ctx); err != nil {
		return err
	}
	a.broker = b
	a.started("broker", b)
	return nil
}

func (a *App) buildEngine(ctx context.Context) error {
	policy, err := egress.New(a.cfg.Tasks.Allow, a.egressOptions...)
	if err != nil {
		return fmt.Errorf("tasks.allow: %w", err)
	}
	a.egress = policy
	taskTransport := policy.Transport()
	if a.cfg.Tasks.Proxy != "" {
		u, err := egress.ParseProxy(a.cfg.Tasks.Proxy.Reveal())
		if err != nil {
			return fmt.Errorf("tasks.proxy: %w", err)
		}
		taskTransport = policy.ProxyTransport(u)
	}
	e, err := outbound.New(outboundRoutes(a.cfg.Routes), a.store, a.broker, outbound.Config{
		UserAgent:     "hookgate/" + Version,
		Metrics:       outbound.NewMetrics(a.consoleRegisterer()),
		Tasks:         outboundTasks(a.cfg.Tasks),
		TaskTransport: taskTransport,
		State:         a.deliveryState(),
		Alerts:        a.outboundAlerts(),
		Pauses:        a.clusterPauses(),
		Takes:         a.clusterTakes(),
	}, a.log.With("component", "outbound"))
	if err != nil {
		return err
	}
	a.engine = e
	a.Registry.MustRegister(e.Collector())
	return nil
}

func (a *App) startEngine(ctx context.Context) error {
	if err := a.engine.Start(ctx); err != nil {
		return err
	}
	a.started("deliveries", a.engine)
	return nil
}

func (a *App) startRelay(ctx context.Context) error {
	published := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hookgate_outbox_published_total", Help: "Events published to JetStream and acknowledged.",
	})
	publishErrors := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hookgate_outbox_publish_errors_total", Help: "Failed outbox publish rounds.",
	})
	parked := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hookgate_outbox_parked_total", Help: "Events the broker refused for their content, set aside (GET /v1/outbox/parked).",
	})
	a.Registry.MustRegister(published, publishErrors, parked)
	// Before publishing anything, the relay has the broker create the
	// stream with every route's consumer (an interest stream drops what no
	// consumer wants), and puts back in the outbox what the stream lost
	// that a route still owes.
	a.broker.Declare(a.engine.ConsumerSet())
	a.relay = relay.New(a.store, a.broker, relay.Config{
		OnPublished: func(n int) { published.Add(float64(n)) },
		OnError:     func(error) { publishErrors.Inc() },
		OnParked:    func(*store.Event, error) { parked.Inc() },
		Recovery:    &relay.Recovery{Store: a.store, Owed: a.engine},
		Publisher:   a.relayPublisher(),
	}, a.log.With("component", "relay"))
	if err := a.relay.Start(ctx); err != nil {
		return err
	}
	a.started("relay", a.relay)
	return nil
}

func (a *App) startHTTP(ctx context.Context) error {
	opts := inbound.Options{
		Notify:  a.relay.Notify,
		Metrics: inbound.NewMetrics(a.consoleRegisterer()),
	}
	if a.claims != nil {
		opts.Cluster, opts.ClusterTimeout = a.claims, a.cfg.Cluster.ClaimTimeout
	}
	h, err := inbound.New(inboundSources(a.cfg.Sources), a.store, a.log.With("component", "inbound"), opts)
	if err != nil {
		return err
	}
	a.inbound = h
	hc := a.cfg.HTTP
	httpLog := a.log.With("component", "http")
	limit := max(h.MaxBody(), a.cfg.Tasks.MaxBody) // each endpoint checks its own limit too
	a.http = fiber.New(fiber.Config{
		AppName:               "hookgate",
		DisableStartupMessage: true,
		BodyLimit:             limit + 1,
		StreamRequestBody:     true, // bodyBudget reads bodies as they arrive
		ReadTimeout:           hc.ReadTimeout,
		WriteTimeout:          hc.WriteTimeout,
		IdleTimeout:           hc.IdleTimeout,
		ErrorHandler:          httperror.Handler(httpLog),
	})
	srv := a.http.Server()
	srv.ErrorHandler = httperror.ServerErrorHandler(httpLog, func(ctx *fasthttp.RequestCtx) bool {
		tc, ok := ctx.Conn().(*trackedConn)
		return ok && !tc.used.Load()
	})
	srv.Logger = httperror.Logger{Log: httpLog}
	srv.SecureErrorLogMessage = true
	panics := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hookgate_http_panics_total", Help: "Requests whose handler panicked, answered 500 (logged with the stack).",
	})
	a.Registry.MustRegister(panics)
	srv.Handler = recoverPanics(knownMethods(srv.Handler), httpLog, panics)
	a.http.Use(framing(httpLog))
	budget := newBodyBudget(hc.BodyMemory, limit, httpLog)
	srv.HeaderReceived = budget.headerReceived
	a.http.Use(budget.handle)
	a.http.Use(decodeContent(limit, httpLog))
	h.Register(a.http)
	api := admin.New(a.cfg.API.Tokens.Reveal(), a.cfg.Tasks.Tokens.Reveal(), a.store, a.engine, a.log.With("component", "admin")).
		ClusterMode(a.cfg.Cluster.Enabled)
	api.Register(a.http)
	if err := a.mountConsole(ctx, api); err != nil {
		return err
	}
	a.registerOps(a.http)
	tasks.New(a.tasksConfig(), a.store, a.egress, a.relay.Notify, a.Registry, a.log.With("component", "tasks")).Register(a.http)
	// No catch-all: the router answers 404 for an unknown path and 405
	// (with Allow) for a known path with another method.
	ln, err := net.Listen("tcp", a.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", a.cfg.Listen, err)
	}
	nofile := openFileLimit()
	maxConns := effectiveMaxConns(hc.MaxConnections, nofile)
	a.conns = newConnListener(ln, maxConns, httpLog)
	a.ln = a.conns
	a.served = make(chan error, 1)
	conns := a.conns
	a.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "hookgate_http_connections_open",
			Help: "HTTP connections open now."}, func() float64 { return float64(conns.open()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "hookgate_http_connections_max",
			Help: "The most HTTP connections open at once (http.max_connections as in force)."},
			func() float64 { return float64(maxConns) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "hookgate_http_accept_errors_total",
			Help: "Failed accepts retried (EMFILE, ENFILE and the like)."}, func() float64 { return float64(conns.failed.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "hookgate_http_body_bytes_held",
			Help: "Request body bytes held in the body budget (http.body_memory), by declared length."},
			func() float64 { return float64(budget.held.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "hookgate_http_body_busy_total",
			Help: "Requests answered 503 server_busy: no room in the body budget."}, func() float64 { return float64(budget.busy.Load()) }),
	)
	a.log.Info("http limits", "max_connections", maxConns, "configured_max_connections", hc.MaxConnections,
		"open_file_limit", nofile, "read_timeout", hc.ReadTimeout, "idle_timeout", hc.IdleTimeout,
		"write_timeout", hc.WriteTimeout, "body_memory", hc.BodyMemory, "max_body", limit)
	go func() { a.served <- a.http.Listener(a.conns) }()
	a.started("http", stopFunc(a.stopHTTP))
	return nil
}

// stopHTTP stops taking requests and answers those in flight.
func (a *App) stopHTTP(ctx context.Context) error {
	a.stopping.Store(true)
	// Connections that never sent a request would hold the shutdown until
	// its deadline: close them as it runs.
	stopSweep := make(chan struct{})
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			a.conns.closeUnused()
			select {
			case <-stopSweep:
				return
			case <-t.C:
			}
		}
	}()
	err := a.http.ShutdownWithContext(ctx)
	close(stopSweep)
	return err
}

// stopFunc is a Stop of the app's own.
type stopFunc func(ctx context.Context) error

func (f stopFunc) Stop(ctx context.Context) error { return f(ctx) }

// Addr is the HTTP listen address (useful with port 0).
func (a *App) Addr() string {
	if a.ln == nil {
		return ""
	}
	return a.ln.Addr().String()
}

// Store returns the app's store (for tests and tools).
func (a *App) Store() *store.Store { return a.store }

// Broker returns the app's broker (for tests and tools).
func (a *App) Broker() *jetstream.Broker { return a.broker }

// Stop stops what Start started, in reverse: it stops taking requests and
// answers those in flight, stops retention, lets deliveries in flight
// finish (or hands them back at the deadline), stops the relay, closes
// NATS and the embedded server, then the store. Safe to call twice.
func (a *App) Stop(ctx context.Context) error {
	a.stopOnce.Do(func() {
		var errs []error
		for i := len(a.running) - 1; i >= 0; i-- {
			s := a.running[i]
			if err := s.svc.Stop(ctx); err != nil {
				errs = append(errs, fmt.Errorf("stop %s: %w", s.name, err))
			}
		}
		a.stopErr = errors.Join(errs...)
		a.log.Info("hookgate stopped")
	})
	return a.stopErr
}
