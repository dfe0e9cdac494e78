package app

import (
	"context"
	"fmt"

	"github.com/hookgate/hookgate/admin"
	"github.com/hookgate/hookgate/console"
)

// mountConsole serves the web console at /console/ (its data to operators'
// tokens only) and starts sampling the counters its overview charts.
func (a *App) mountConsole(ctx context.Context, api *admin.Handler) error {
	stats := console.NewStats(a.Registry, 0)
	if err := stats.Start(ctx); err != nil {
		return fmt.Errorf("console stats: %w", err)
	}
	a.started("console stats", stats)
	a.consoleStats = stats
	sources := make([]string, len(a.cfg.Sources))
	for i, s := range a.cfg.Sources {
		sources[i] = s.Name
	}
	c, err := console.New(console.Config{
		Authorize: api.Authorize,
		Store:     a.store,
		Routes:    a.engine,
		Stats:     stats,
		Sources:   sources,
	}, a.log.With("component", "console"))
	if err != nil {
		return fmt.Errorf("console: %w", err)
	}
	c.Register(a.http)
	return nil
}

// ConsoleStats returns what samples the counters the console charts (nil
// before Start): tests take samples with it.
func (a *App) ConsoleStats() *console.Stats { return a.consoleStats }
