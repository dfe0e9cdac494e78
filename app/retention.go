package app

import (
	"context"

	"github.com/hookgate/hookgate/store"
)

// startRetention starts what runs beside intake and delivery: the store
// gauges and the retention pruner, which keeps every event a configured
// route has not finished.
func (a *App) startRetention(ctx context.Context) error {
	onPruned := a.registerStoreMetrics()
	r := a.cfg.Retention
	a.pruner = store.NewPruner(a.store, store.PrunerConfig{
		Events:   r.Events,
		Attempts: r.Attempts,
		Interval: r.Interval,
		Keep: func(ev *store.OldEvent) bool {
			return !a.engine.Finished(ev)
		},
		OnPruned: onPruned,
	}, a.log.With("component", "retention"))
	if err := a.pruner.Start(ctx); err != nil {
		return err
	}
	a.started("retention", a.pruner)
	return nil
}
