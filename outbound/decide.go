package outbound

import (
	"errors"
	"net/http"
	"time"

	"github.com/hookgate/hookgate/store"
)

// The delivery decisions: pure functions from where a delivery stands and
// what a round came to, to where it stands next and what becomes of its
// JetStream message. Engine.settle applies the message's part.

// verb is what becomes of a JetStream message.
type verb uint8

const (
	ack      verb = iota + 1 // done with it: delivered, dead, or not this route's
	nak                      // deliver it again after a delay
	term                     // never deliver it again: it cannot be read
	handBack                 // a stop: deliver it again at once, here or elsewhere
)

func (v verb) String() string {
	switch v {
	case ack:
		return "ack"
	case nak:
		return "nak"
	case term:
		return "term"
	case handBack:
		return "hand back"
	}
	return "none"
}

// action is what to do with a message: a nak waits delay, or until at
// when at is set (a delivery's next attempt).
type action struct {
	verb  verb
	delay time.Duration
	at    time.Time
}

var (
	actAck      = action{verb: ack}
	actTerm     = action{verb: term}
	actHandBack = action{verb: handBack}
)

func nakFor(d time.Duration) action  { return action{verb: nak, delay: d} }
func nakUntil(t time.Time) action    { return action{verb: nak, at: t} }
func (a action) wait() time.Duration { return waitOf(a, time.Now()) }

// waitOf is how long a nak asks JetStream to wait, as of now.
func waitOf(a action, now time.Time) time.Duration {
	if !a.at.IsZero() {
		return a.at.Sub(now)
	}
	return a.delay
}

// How long a message waits when...
const (
	stateRetry        = 5 * time.Second // the store cannot say or store where its delivery stands
	unrecordedRetry   = 5 * time.Second // its round's outcome could not be recorded
	roundRunningRetry = time.Second     // a round for its event runs in this process
	dueSoon           = time.Second     // a scheduled round this close is run now
	pausedRetry       = 5 * time.Second // its route is paused
	elsewhereRetry    = time.Second     // another gateway's route takes it, this one's does not (plus up to elsewhereJitter)
	elsewhereJitter   = time.Second
)

// triage decides, before anything is read, whether the route here handles
// a message: paused, it holds every message (in a cluster another
// gateway may take what this one does not, in a rolling change); one its
// configuration here does not take (here false) is held while another
// gateway's route takes it (elsewhere: a rolling change; it delivers it
// when it pulls it) for wait, and acked as no route's when none does.
// wait varies: a gateway that naks and fetches again in step with the
// message's return would get it every time.
func triage(paused, here, elsewhere bool, wait time.Duration) (handle bool, act action) {
	switch {
	case paused:
		return false, nakFor(pausedRetry)
	case here:
		return true, action{}
	case elsewhere:
		return false, nakFor(wait)
	}
	return false, actAck
}

// admit decides from a delivery's stored status (err is the read's
// error) whether a round runs now; if not, what becomes of the message.
// took is whether the route takes the message's event with no delivery
// of it (tookMessage): a copy published anew for another route, of an
// event the route did not take when it was received, is not its own.
func admit(prev store.DeliveryStatus, err error, took bool, now time.Time) (run bool, act action) {
	switch {
	case errors.Is(err, store.ErrNotFound) && !took:
		return false, actAck
	case errors.Is(err, store.ErrNotFound):
		return true, action{}
	case err != nil:
		return false, nakFor(stateRetry)
	case prev.Terminal():
		return false, actAck // delivered already (a re-publish or a redelivery)
	case prev.State == store.StateRetrying && prev.NextAttemptAt.Sub(now) > dueSoon:
		return false, nakUntil(prev.NextAttemptAt)
	}
	return true, action{}
}

// roundResult is what a round's requests came to.
type roundResult struct {
	attempts   int           // attempts made (or recorded) in the round
	last       store.Attempt // the last of them
	unsendable bool          // the request cannot be built: no round can ever send it
	err        string        // the client's error after the last attempt, if any
	stopped    bool          // the engine stopped during the round
}

// Round outcomes, as metrics and logs name them.
const (
	outcomeSucceeded = "succeeded"
	outcomeRetrying  = "retrying"
	outcomeDead      = "dead"
	outcomeFailed    = "failed" // an operator's round that failed
	outcomeFiltered  = "filtered"
)

// health is a round's word on its downstream, for the breaker.
type health uint8

const (
	noWord    health = iota // cut short, not recorded, or 410 Gone
	healthy                 // it answered 2xx
	unhealthy               // it failed
)

// change is where a delivery stands after a round.
type change struct {
	state         string
	rounds        int
	nextAttemptAt time.Time
	lastStatus    int
	lastError     string
}

// decision is what follows a round.
type decision struct {
	record  bool   // the round is recorded (false: it made no attempt)
	next    change // the delivery as recorded
	outcome string // an outcome name, or "" for a round cut short
	health  health // for the breaker
	then    action // the message's fate once the round is recorded
}

// decide says what follows a round of a delivery that stood at prev:
// 2xx succeeded; 410 Gone, or a request that cannot be built, is dead; a
// failed round takes the next step of schedule, or is dead past its last;
// a round cut short by a stop keeps the delivery where it was and hands
// the message back. manual rounds (an operator's retry or replay) leave
// the state and schedule where they were, and stay pending if cut short;
// one of a delivery that had none (prev.State "": a replay to a route
// that had no delivery of the event) fails as any first round does.
func decide(prev store.DeliveryStatus, res roundResult, schedule []time.Duration, now time.Time, manual bool) decision {
	next := change{state: store.StatePending, rounds: prev.Rounds, nextAttemptAt: prev.NextAttemptAt}
	if prev.State != "" { // a delivery is stored
		next.state = prev.State
	}
	next.lastStatus, next.lastError = lastOf(res)
	outcome := ""
	switch {
	case res.unsendable:
		next.state, next.nextAttemptAt, outcome = store.StateDead, time.Time{}, outcomeDead
	case res.last.Status >= 200 && res.last.Status < 300:
		next.state, next.nextAttemptAt, next.lastError, outcome = store.StateSucceeded, time.Time{}, "", outcomeSucceeded
	case res.last.Status == http.StatusGone:
		next.state, next.nextAttemptAt, outcome = store.StateDead, time.Time{}, outcomeDead
	case res.stopped:
		if res.attempts == 0 {
			return decision{then: actHandBack} // nothing to record
		}
		if manual {
			// The next start puts its event back in the outbox (Engine.Recover).
			next.state, next.nextAttemptAt = store.StatePending, time.Time{}
		}
	case manual && prev.State != "":
		outcome = outcomeFailed
	default:
		next.rounds++
		if next.rounds > len(schedule) {
			next.state, next.nextAttemptAt, outcome = store.StateDead, time.Time{}, outcomeDead
		} else {
			next.state, next.nextAttemptAt, outcome = store.StateRetrying, now.Add(schedule[next.rounds-1]), outcomeRetrying
		}
	}
	d := decision{record: true, next: next, outcome: outcome}
	switch {
	case res.stopped:
		d.then = actHandBack
	case next.state == store.StateRetrying:
		d.then, d.health = nakUntil(next.nextAttemptAt), unhealthy
	case next.state == store.StateSucceeded:
		d.then, d.health = actAck, healthy
	case next.state == store.StateDead && next.lastStatus == http.StatusGone:
		d.then = actAck
	default:
		d.then, d.health = actAck, unhealthy
	}
	return d
}

// lastOf is the status and error a round leaves on its delivery.
func lastOf(res roundResult) (int, string) {
	status, msg := res.last.Status, res.last.Error
	if msg == "" && status != 0 && (status < 200 || status >= 300) {
		msg = http.StatusText(status)
	}
	if msg == "" && res.err != "" && !res.stopped {
		msg = res.err
	}
	return status, msg
}

// unrecorded is what follows a round whose outcome the store refused:
// the message is handed back at a stop, else tried again later (not in a
// tight loop), and the breaker hears nothing.
func (d decision) unrecorded(stopped bool) decision {
	d.record, d.health, d.then = false, noWord, nakFor(unrecordedRetry)
	if stopped {
		d.then = actHandBack
	}
	return d
}

// screen decides what a route's filter's verdict on an event (pass, or
// evalErr: it could not be evaluated) makes of a round that is due on a
// delivery standing at prev. run: the round runs. Otherwise the delivery
// is recorded filtered, terminal, without an attempt (its rounds and
// last status kept; last error the filter's, if it failed) and the
// message acked: an evaluation error counts as not matching (its text cut
// to maxFilterErrLen bytes).
func screen(prev store.DeliveryStatus, pass bool, evalErr error) (run bool, d decision) {
	if pass && evalErr == nil {
		return true, decision{}
	}
	next := change{state: store.StateFiltered, rounds: prev.Rounds}
	if evalErr != nil {
		next.lastError = "filter: " + cutError(evalErr.Error(), maxFilterErrLen)
	}
	return false, decision{record: true, next: next, outcome: outcomeFiltered, health: noWord, then: actAck}
}
