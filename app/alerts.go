package app

import (
	"context"
	"os"
	"time"

	"github.com/hookgate/hookgate/alert"
	"github.com/hookgate/hookgate/outbound"
)

// startAlerts starts the alerter when alerts.url is set.
func (a *App) startAlerts(ctx context.Context) error {
	ac := a.cfg.Alerts
	if ac.URL == "" {
		return nil
	}
	host, _ := os.Hostname()
	al, err := alert.New(alert.Config{
		URL:                ac.URL.Reveal(),
		Secret:             ac.Secret.Reveal(),
		DeadLetterInterval: ac.DeadLetterInterval,
		OutboxAge:          ac.OutboxAge,
		OutboxOldest:       func(context.Context) (time.Duration, error) { return a.outboxAge.get() },
		Gateway:            host,
		UserAgent:          "hookgate/" + Version,
		Registerer:         a.Registry,
	}, a.log.With("component", "alert"))
	if err != nil {
		return err
	}
	if err := al.Start(ctx); err != nil {
		return err
	}
	a.alerts = al
	a.started("alerts", al)
	return nil
}

// outboundAlerts is the alerter as the engine hears of it; nil without one.
func (a *App) outboundAlerts() outbound.Alerts {
	if a.alerts == nil {
		return nil
	}
	return a.alerts
}
