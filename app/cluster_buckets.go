package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hookgate/hookgate/cluster"
	"github.com/hookgate/hookgate/config"
)

// ensureDeliveries readies the cluster delivery state's bucket (cluster
// mode only): created, or updated to the config, now if NATS answers
// (else at the first round). Stop stops its background writes.
func (a *App) ensureDeliveries(ctx context.Context) error {
	if a.deliveries == nil {
		return nil
	}
	a.started("cluster delivery state", a.deliveries) // stopped after the engine, before the broker
	ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := a.deliveries.Ensure(ectx); err != nil {
		if cerr := refusedConfigError(err, "retention.events"); cerr != nil {
			return cerr
		}
		a.log.Warn("cluster: the delivery state bucket could not be readied; rounds wait for NATS", "err", err)
	}
	return nil
}

// refusedConfigError is, when JetStream refused to update a cluster
// bucket to the config (err a *cluster.RefusedError), the *config.Error
// naming the key refused (nats.replicas when the replicas change, which
// JetStream refuses when the cluster cannot place them; else ttlKey for
// the ttl): the gateway exits 2. Else nil.
func refusedConfigError(err error, ttlKey string) error {
	var refused *cluster.RefusedError
	if !errors.As(err, &refused) {
		return nil
	}
	path := ""
	for _, c := range refused.Changes {
		switch {
		case c.Setting == "replicas":
			path = "nats.replicas"
		case c.Setting == "ttl" && path == "":
			path = ttlKey
		}
	}
	return &config.Error{Path: path, Msg: fmt.Sprintf("the running NATS cluster does not take it: %v", err)}
}
