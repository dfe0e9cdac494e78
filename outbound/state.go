package outbound

import (
	"context"
	"sync"

	"github.com/hookgate/hookgate/store"
)

// DeliveryState is where each (route, event) delivery stands: read before
// a round, claimed for the round, and the round's outcome recorded after
// it. The default keeps it in the store with claims held in this process;
// cluster mode (package cluster) keeps it in JetStream KV, claims
// included, so that one round of a (route, event) runs at a time across
// processes.
type DeliveryState interface {
	// Status is the delivery of event seq (source, eventID) to route:
	// store.ErrNotFound if there is none yet, store.ErrOtherEvent if seq
	// is not that event's.
	Status(ctx context.Context, route string, seq int64, source, eventID string) (store.DeliveryStatus, error)
	// TryClaim claims the next round of k, or reports false while another
	// round of it runs (or the claim cannot be made).
	TryClaim(ctx context.Context, k DeliveryKey) bool
	// Claim waits for the claim; false if ctx ends first.
	Claim(ctx context.Context, k DeliveryKey) bool
	// Release ends a claim.
	Release(k DeliveryKey)
	// Record commits a round's outcome and attempts (setting d's ID and
	// Attempts) before its message is settled.
	Record(ctx context.Context, d *store.Delivery, attempts []store.Attempt) error
}

// DeliveryKey names a delivery: its route and event, by the event's intake
// sequence in this store and by its identity, the same in every store.
type DeliveryKey struct {
	Route           string
	Seq             int64
	Source, EventID string
	// Fresh hints that no round of it is likely recorded yet (its
	// message's first delivery): a state may then try its claim without
	// reading first. A hint only: a claim is right either way.
	Fresh bool
}

// identityClaims is a DeliveryState whose claims are of a delivery's
// route, source and event ID, whatever its seq here (cluster mode): a
// claim made under a message's seq also holds once the event is adopted
// under this store's.
type identityClaims interface{ ClaimsByIdentity() }

// stateResetter is a DeliveryState shared with other processes (cluster
// mode). An operator's reset of a delivery to pending is written there
// before the retry or replay is answered: if this process stops before
// the operator's round claims the delivery, the round of its event put
// back in the outbox at the next start (on any process) finds it pending
// there, as in this store, not in the state before the reset. The reset's
// record, written with the local reset, shows it on the other processes.
type stateResetter interface {
	// Reset sets k pending in the shared state; undo, if not nil, puts
	// back what Reset wrote over while nothing was written since, and rec,
	// if not nil, is the reset to record with the local one
	// (store.StateRecord). A retry (resend false) of a delivery that
	// succeeded there is ErrSucceeded; a round of k running (its lease) is
	// ErrRoundQueued, with nothing written; a state that cannot be read or
	// written is store.ErrUnavailable.
	Reset(ctx context.Context, k DeliveryKey, resend bool) (rec *store.StateRecord, undo func(), err error)
	// Recorded is told that resets' records were written with the local
	// resets.
	Recorded()
	// Unreset, with k's claim held, makes its release write state in
	// place of a reset's pending: the operator's round ran nothing.
	Unreset(k DeliveryKey, state string)
}

// StatusRecorder is what the default DeliveryState needs of the store.
type StatusRecorder interface {
	DeliveryStatus(ctx context.Context, route string, seq int64, source, eventID string) (store.DeliveryStatus, error)
	RecordRound(ctx context.Context, d *store.Delivery, attempts []store.Attempt) error
}

// localState is the delivery state of one process: statuses and outcomes
// in the store, claims in memory.
type localState struct {
	st     StatusRecorder
	mu     sync.Mutex
	claims map[string]*inflight // by route
}

func newLocalState(st StatusRecorder) *localState {
	return &localState{st: st, claims: map[string]*inflight{}}
}

func (l *localState) Status(ctx context.Context, route string, seq int64, source, eventID string) (store.DeliveryStatus, error) {
	return l.st.DeliveryStatus(ctx, route, seq, source, eventID)
}

func (l *localState) Record(ctx context.Context, d *store.Delivery, attempts []store.Attempt) error {
	return l.st.RecordRound(ctx, d, attempts)
}

func (l *localState) TryClaim(_ context.Context, k DeliveryKey) bool {
	return l.of(k.Route).tryStart(eventKey(k.Seq))
}

func (l *localState) Claim(ctx context.Context, k DeliveryKey) bool {
	return l.of(k.Route).start(ctx, eventKey(k.Seq))
}

func (l *localState) Release(k DeliveryKey) { l.of(k.Route).done(eventKey(k.Seq)) }

// of is route's claims.
func (l *localState) of(route string) *inflight {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.claims[route]
	if f == nil {
		f = new(inflight)
		l.claims[route] = f
	}
	return f
}
