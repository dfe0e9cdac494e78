package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/cluster"
	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/relay"
	"github.com/hookgate/hookgate/store"
)

// metaGatewayID is the store's fact naming this gateway in cluster claims.
const metaGatewayID = "gateway_id"

// startClaims readies the cluster claim store (cluster mode only): this
// gateway's name, kept in its store, and the KV bucket, created now if
// NATS answers (else at the first claim: intake does not wait for NATS).
func (a *App) startClaims(ctx context.Context) error {
	if !a.cfg.Cluster.Enabled {
		return nil
	}
	id, err := a.store.Meta(ctx, metaGatewayID)
	if err != nil {
		return err
	}
	if id == "" {
		id = newGatewayID()
		if err := a.store.SetMeta(ctx, metaGatewayID, id); err != nil {
			return err
		}
	}
	b := a.broker
	c, err := cluster.New(cluster.Config{
		Gateway:      id,
		Bucket:       cluster.Deployment(a.cfg.NATS.Stream).Claims,
		Replicas:     a.cfg.NATS.Replicas,
		TTL:          a.cfg.Cluster.ClaimTTL,
		JetStream:    func() natsjs.JetStream { return b.JetStream() },
		UntilElected: b.UntilElectedIn,
		Connected:    func() bool { nc := b.Conn(); return nc != nil && nc.IsConnected() },
		Log:          a.log.With("component", "cluster"),
	})
	if err != nil {
		return err
	}
	ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ensure(ectx); err != nil {
		if cerr := refusedConfigError(err, "cluster.claim_ttl"); cerr != nil {
			return cerr
		}
		a.log.Warn("cluster claims: the bucket could not be readied; claims wait for NATS", "err", err)
	}
	a.claims = c
	a.log.Info("cluster mode", "gateway", id, "claim_ttl", a.cfg.Cluster.ClaimTTL)
	return nil
}

// startRecords starts the replication of every gateway's events and
// rounds into every gateway's store (cluster mode only): the records
// stream is created now if NATS answers, else by the loops once it does.
func (a *App) startRecords(ctx context.Context) error {
	if a.claims == nil {
		return nil
	}
	b := a.broker
	names := cluster.Deployment(a.cfg.NATS.Stream)
	r, err := cluster.NewRecords(a.store, cluster.RecordsConfig{
		Gateway:      a.claims.Gateway(),
		Stream:       names.Records,
		Subject:      names.RecordsSubject,
		Replicas:     a.cfg.NATS.Replicas,
		TTL:          a.cfg.Cluster.RecordsTTL,
		JetStream:    func() natsjs.JetStream { return b.JetStream() },
		UntilElected: b.UntilElectedIn,
		Registerer:   a.Registry,
	}, a.log.With("component", "records"))
	if err != nil {
		return err
	}
	ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := r.Ensure(ectx); err != nil {
		a.log.Warn("cluster records: the stream could not be readied; records wait for NATS", "err", err)
	}
	if err := r.Start(ctx); err != nil {
		return err
	}
	a.records = r
	a.started("cluster records", r)
	a.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "hookgate_cluster_records_outbox",
		Help: "Records waiting to be published to the records stream (read at most every 5s)."},
		(&cachedCount{read: a.store.CountRecordsOut}).get))
	return nil
}

// newGatewayID names a gateway: its host name and 8 random hex digits.
func newGatewayID() string {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if r < 0x21 || r > 0x7e || r == '"' || r == '\\' {
			return '_'
		}
		return r
	}, host)
	if len(host) > 48 {
		host = host[:48]
	}
	var b [4]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return fmt.Sprintf("%s-%s", host, hex.EncodeToString(b[:]))
}

// relayPublisher is the relay's Publisher: the broker, behind the cluster
// claim in cluster mode.
func (a *App) relayPublisher() relay.Publisher {
	if a.claims == nil {
		return a.broker
	}
	elsewhere := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hookgate_cluster_claimed_elsewhere_total",
		Help: "Events stored here whose cluster claim another gateway holds: recorded, not published here.",
	})
	a.Registry.MustRegister(elsewhere)
	p := &relay.ClaimingPublisher{
		Claims: a.claims, Next: a.broker, Store: a.store,
		OnElsewhere: func(*store.Event, string) { elsewhere.Inc() },
		Log:         a.log.With("component", "relay"),
	}
	if a.records != nil {
		p.Records = a.records
	}
	return p
}

// deliveryState is where deliveries stand: with cluster.enabled, the
// cluster's JetStream KV bucket (one round of a delivery at a time across
// the gateways); else nil, the engine's default (the store, claims in this
// process).
func (a *App) deliveryState() outbound.DeliveryState {
	if !a.cfg.Cluster.Enabled {
		return nil
	}
	b := a.broker
	cfg := cluster.DeliveryStateConfig{
		Bucket:       cluster.Deployment(a.cfg.NATS.Stream).Deliveries,
		Replicas:     a.cfg.NATS.Replicas,
		TTL:          a.cfg.Retention.Events,
		Routes:       outboundRoutes(a.cfg.Routes),
		Tasks:        outboundTasks(a.cfg.Tasks),
		UntilElected: b.UntilElectedIn,
	}
	if a.records != nil {
		cfg.Replica, cfg.Origin, cfg.OnRecorded = a.store, a.claims.Gateway(), a.records.Notify
	}
	a.deliveries = cluster.NewDeliveryState(func() natsjs.JetStream { return b.JetStream() }, a.store, cfg, a.log.With("component", "cluster"))
	return a.deliveries
}

// newPauses makes the cluster's pauses (cluster mode only); startPauses
// starts its watch once the engine is built.
func (a *App) newPauses(context.Context) error {
	if a.claims == nil {
		return nil
	}
	b := a.broker
	p, err := cluster.NewPauses(cluster.PausesConfig{
		Gateway:      a.claims.Gateway(),
		Bucket:       cluster.Deployment(a.cfg.NATS.Stream).Pauses,
		Replicas:     a.cfg.NATS.Replicas,
		JetStream:    func() natsjs.JetStream { return b.JetStream() },
		Connected:    func() bool { nc := b.Conn(); return nc != nil && nc.IsConnected() },
		UntilElected: b.UntilElectedIn,
	}, a.log.With("component", "cluster"))
	if err != nil {
		return err
	}
	a.pauses = p
	return nil
}

// clusterPauses is where operators' pauses are recorded: in cluster mode
// the bucket every gateway watches; else nil, the engine's default (this
// gateway's store).
func (a *App) clusterPauses() outbound.Pauses {
	if a.pauses == nil {
		return nil
	}
	return a.pauses
}

// startPauses watches the cluster's pauses (cluster mode only), applying
// what the bucket holds before deliveries start, if NATS answers.
func (a *App) startPauses(ctx context.Context) error {
	if a.pauses == nil {
		return nil
	}
	if err := a.pauses.Start(ctx, a.engine); err != nil {
		return err
	}
	a.started("cluster pauses", a.pauses)
	return nil
}

// newTakes makes the records of what each gateway's routes take (cluster
// mode only); startTakes starts their watch before deliveries start.
func (a *App) newTakes(context.Context) error {
	if a.claims == nil {
		return nil
	}
	b := a.broker
	t, err := cluster.NewTakes(cluster.TakesConfig{
		Gateway:      a.claims.Gateway(),
		Bucket:       cluster.Deployment(a.cfg.NATS.Stream).Takes,
		Replicas:     a.cfg.NATS.Replicas,
		JetStream:    func() natsjs.JetStream { return b.JetStream() },
		UntilElected: b.UntilElectedIn,
		TTL:          a.cfg.Cluster.TakesTTL,
	}, a.log.With("component", "cluster"))
	if err != nil {
		return err
	}
	a.takes = t
	return nil
}

// clusterTakes is where the routes' takes are shared: in cluster mode the
// bucket every gateway watches; else nil (a message no route here takes
// is acked).
func (a *App) clusterTakes() outbound.RouteTakes {
	if a.takes == nil {
		return nil
	}
	return a.takes
}

// startTakes watches what the other gateways' routes take (cluster mode
// only), and records what this gateway's take before the relay's recovery
// records a change of it; stopped after the deliveries, it deletes this
// gateway's records.
func (a *App) startTakes(ctx context.Context) error {
	if a.takes == nil {
		return nil
	}
	if err := a.takes.Start(ctx); err != nil {
		return err
	}
	a.started("cluster takes", a.takes)
	a.engine.AnnounceTakes(ctx)
	return nil
}
