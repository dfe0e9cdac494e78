package outbound

import (
	"context"
	"time"
)

// RouteTakes shares what each gateway's routes take between the gateways
// of a cluster, which share each route's consumer (package cluster).
type RouteTakes interface {
	// Announce records, for the other gateways, that route takes here the
	// events of sources of types events (empty: every type).
	Announce(ctx context.Context, route string, sources, events []string) error
	// Elsewhere reports whether another live gateway's route takes what
	// match says it takes, or cannot tell yet.
	Elsewhere(route string, match func(sources, events []string) bool) bool
}

// announceRetry is how long a route waits to announce again what it
// takes, after a failure, before it pulls.
const announceRetry = time.Second

// announce records what r takes in the cluster before r pulls, trying
// again until it is recorded; false once ctx ends. A route that pulled
// on a wider configuration unannounced would have the others ack, as no
// route's, the messages of the new kind they pull.
func (e *Engine) announce(ctx context.Context, r *route) bool {
	if e.cfg.Takes == nil {
		return true
	}
	for warned := false; ; warned = true {
		err := e.cfg.Takes.Announce(ctx, r.cfg.Name, r.cfg.Sources, r.cfg.Events)
		if err == nil {
			return true
		}
		if !warned {
			e.log.Warn("cannot record in the cluster what the route takes; it pulls once recorded", "route", r.cfg.Name, "err", err)
		}
		if !sleep(ctx, announceRetry) {
			return false
		}
	}
}

// AnnounceTakes records what every route takes in the cluster, at start:
// the other gateways hear of it as soon as NATS answers. Call it before
// the relay's recovery (Owed), which records a route's change of what it
// takes: the others then hold the events of a new kind from before the
// change on. It stops at the first failure; each route's pull tries again
// before it pulls. Start calls it too.
func (e *Engine) AnnounceTakes(ctx context.Context) {
	if e.cfg.Takes == nil {
		return
	}
	for _, r := range e.routes {
		if err := e.cfg.Takes.Announce(ctx, r.cfg.Name, r.cfg.Sources, r.cfg.Events); err != nil {
			return
		}
	}
}

// takenElsewhere reports whether another gateway's route r takes ev (or
// cannot tell yet); false without a cluster.
func (e *Engine) takenElsewhere(r *route, ev envelope) bool {
	if e.cfg.Takes == nil {
		return false
	}
	return e.cfg.Takes.Elsewhere(r.cfg.Name, func(sources, events []string) bool {
		return takes{Sources: sources, Events: events}.matches(ev.source, ev.typ)
	})
}
