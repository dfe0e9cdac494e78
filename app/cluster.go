package app

import (
	"github.com/hookgate/hookgate/cluster"
	"github.com/hookgate/hookgate/outbound"
)

// deliveryState is where deliveries stand: with cluster.enabled, the
// cluster's JetStream KV bucket (one round of a delivery at a time across
// the gateways); else nil, the engine's default (the store, claims in this
// process).
func (a *App) deliveryState() outbound.DeliveryState {
	if !a.cfg.Cluster.Enabled {
		return nil
	}
	return cluster.NewDeliveryState(a.broker.JetStream(), a.store, cluster.DeliveryStateConfig{
		Replicas: a.cfg.NATS.Replicas,
		TTL:      a.cfg.Retention.Events,
		Routes:   outboundRoutes(a.cfg.Routes),
		Tasks:    outboundTasks(a.cfg.Tasks),
	}, a.log.With("component", "cluster"))
}
