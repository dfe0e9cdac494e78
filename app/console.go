package app

import (
	"context"
	"fmt"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/admin"
	"github.com/hookgate/hookgate/cluster"
	"github.com/hookgate/hookgate/console"
)

// mountConsole serves the web console at /console/ (its data to operators'
// tokens only).
func (a *App) mountConsole(ctx context.Context, api *admin.Handler) error {
	a.consoleRegisterer() // creates consoleReg when no metrics were registered yet
	shared, err := a.statsBucket(ctx)
	if err != nil {
		return err
	}
	a.consoleStats = console.NewStats(a.consoleReg, console.StatsConfig{
		Shared: shared,
		Log:    a.log.With("component", "console"),
	})
	sources := make([]string, len(a.cfg.Sources))
	for i, s := range a.cfg.Sources {
		sources[i] = s.Name
	}
	c, err := console.New(console.Config{
		Authorize: api.Authorize,
		Disabled:  len(a.cfg.API.Tokens) == 0,
		Store:     a.store,
		Routes:    a.engine,
		Stats:     a.consoleStats,
		Sources:   sources,
		// Half the store's readers at most read bodies for searches: the
		// others answer /readyz, the relay and the API meanwhile.
		Searches: max(1, a.cfg.Store.Readers/2),
	}, a.log.With("component", "console"))
	if err != nil {
		return fmt.Errorf("console: %w", err)
	}
	c.Register(a.http)
	return nil
}

// statsBucket is where the console's samples are kept, in JetStream (the
// KV bucket HOOKGATE_STATS): in cluster mode every gateway's, which the
// console sums; else this gateway's alone (others may share its NATS),
// named by the store's gateway_id as in cluster mode.
func (a *App) statsBucket(ctx context.Context) (console.Shared, error) {
	gateway := ""
	if a.claims != nil {
		gateway = a.claims.Gateway()
	} else {
		id, err := a.store.Meta(ctx, metaGatewayID)
		if err != nil {
			return nil, fmt.Errorf("console stats: gateway name: %w", err)
		}
		if id == "" {
			id = newGatewayID()
			if err := a.store.SetMeta(ctx, metaGatewayID, id); err != nil {
				return nil, fmt.Errorf("console stats: gateway name: %w", err)
			}
		}
		gateway = id
	}
	b := a.broker
	return cluster.NewStatsBucket(cluster.StatsConfig{
		Gateway:      gateway,
		Bucket:       cluster.Deployment(a.cfg.NATS.Stream).Stats,
		Replicas:     a.cfg.NATS.Replicas,
		Own:          a.claims == nil,
		JetStream:    func() natsjs.JetStream { return b.JetStream() },
		UntilElected: b.UntilElectedIn,
	}, a.log.With("component", "console"))
}

// startConsoleStats starts sampling the counters the console charts.
func (a *App) startConsoleStats(ctx context.Context) error {
	if err := a.consoleStats.Start(ctx); err != nil {
		return err
	}
	a.started("console stats", a.consoleStats)
	return nil
}

// readyConsoleFlush has Stop take the console's last sample after every
// service started later (the HTTP server, the deliveries) has stopped,
// before NATS.
func (a *App) readyConsoleFlush(context.Context) error {
	a.started("console stats' last sample", stopFunc(func(ctx context.Context) error {
		if a.consoleStats != nil {
			a.consoleStats.Flush(ctx)
		}
		return nil
	}))
	return nil
}

// consoleRegisterer registers a collector in Registry and in the registry
// the console samples: that one holds only the intake and delivery
// counters, so sampling it reads no gauge (some are cached reads of the
// store or JetStream).
func (a *App) consoleRegisterer() prometheus.Registerer {
	if a.consoleReg == nil {
		a.consoleReg = prometheus.NewRegistry()
	}
	return teeRegisterer{a.Registry, a.consoleReg}
}

// teeRegisterer registers each collector in every one of its registerers.
type teeRegisterer []prometheus.Registerer

func (t teeRegisterer) Register(c prometheus.Collector) error {
	for _, r := range t {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (t teeRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := t.Register(c); err != nil {
			panic(err)
		}
	}
}

func (t teeRegisterer) Unregister(c prometheus.Collector) bool {
	ok := true
	for _, r := range t {
		ok = r.Unregister(c) && ok
	}
	return ok
}

// ConsoleStats returns what samples the counters the console charts (nil
// before Start): tests take samples with it.
func (a *App) ConsoleStats() *console.Stats { return a.consoleStats }
