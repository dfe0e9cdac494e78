package app

import (
	"github.com/hookgate/hookgate/jetstream"
	"github.com/hookgate/hookgate/tasks"
)

// tasksConfig is the task API's config: a stored task bounded by the
// broker's room when known (checkPayload ran); in cluster mode, an
// Idempotency-Key is one task across the gateways, through the cluster
// claims (within cluster.claim_timeout).
func (a *App) tasksConfig() tasks.Config {
	cfg := tasksConfig(a.cfg.Tasks)
	if limit := a.broker.MaxPayload(); limit > 0 {
		cfg.MaxStored = int(limit - jetstream.HeaderRoom)
	}
	if a.claims != nil {
		cfg.Cluster, cfg.ClusterTimeout = a.claims, a.cfg.Cluster.ClaimTimeout
	}
	return cfg
}
