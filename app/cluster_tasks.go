package app

import "github.com/hookgate/hookgate/tasks"

// tasksConfig is the task API's config: in cluster mode, an
// Idempotency-Key is one task across the gateways, through the cluster
// claims (within cluster.claim_timeout).
func (a *App) tasksConfig() tasks.Config {
	cfg := tasksConfig(a.cfg.Tasks)
	if a.claims != nil {
		cfg.Cluster, cfg.ClusterTimeout = a.claims, a.cfg.Cluster.ClaimTimeout
	}
	return cfg
}
