package outbound

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hookgate/hookgate/store"
)

var (
	now      = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	schedule = []time.Duration{time.Minute, time.Hour}
)

func TestAdmit(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		prev store.DeliveryStatus
		err  error
		run  bool
		act  action
		// notTaken: the route did not take the event when it was received.
		notTaken bool
	}{
		{"never delivered", store.DeliveryStatus{}, store.ErrNotFound, true, action{}, false},
		{"never delivered, not the route's at receipt", store.DeliveryStatus{}, store.ErrNotFound, false, actAck, true},
		{"pending, not the route's at receipt (a replay to it)", store.DeliveryStatus{State: store.StatePending}, nil, true, action{}, true},
		{"retrying, not the route's at receipt", store.DeliveryStatus{State: store.StateRetrying, NextAttemptAt: now.Add(-time.Minute)}, nil, true, action{}, true},
		{"not found, wrapped", store.DeliveryStatus{}, fmt.Errorf("x: %w", store.ErrNotFound), true, action{}, false},
		{"store unavailable", store.DeliveryStatus{}, store.ErrUnavailable, false, nakFor(5 * time.Second), false},
		{"still another event's seq", store.DeliveryStatus{}, store.ErrOtherEvent, false, nakFor(5 * time.Second), false},
		{"pending", store.DeliveryStatus{State: store.StatePending}, nil, true, action{}, false},
		{"succeeded", store.DeliveryStatus{State: store.StateSucceeded}, nil, false, actAck, false},
		{"dead", store.DeliveryStatus{State: store.StateDead}, nil, false, actAck, false},
		{"retrying, due", store.DeliveryStatus{State: store.StateRetrying, NextAttemptAt: now.Add(-time.Minute)}, nil, true, action{}, false},
		{"retrying, due within a second", store.DeliveryStatus{State: store.StateRetrying, NextAttemptAt: now.Add(time.Second)}, nil, true, action{}, false},
		{"retrying, not yet due", store.DeliveryStatus{State: store.StateRetrying, NextAttemptAt: now.Add(time.Hour)}, nil, false, nakUntil(now.Add(time.Hour)), false},
	}
	for _, c := range cases {
		run, act := admit(c.prev, c.err, !c.notTaken, now)
		if run != c.run || act != c.act {
			t.Errorf("%s: admit = %v, %+v; want %v, %+v", c.name, run, act, c.run, c.act)
		}
	}
}

// A message the route here does not take is held while another gateway's
// route takes it (a rolling change of its events or sources), acked when
// none does; a paused route holds every message.
func TestTriage(t *testing.T) {
	t.Parallel()
	widened := takes{Sources: []string{"s"}, Events: []string{"t", "u"}}
	moreSources := takes{Sources: []string{"s", "s2"}, Events: []string{"t"}}
	cases := []struct {
		name        string
		paused      bool
		here        takes   // the route's configuration here
		others      []takes // other gateways' live records of the route
		source, typ string
		handle      bool
		act         action
	}{
		{"taken here", false, takes{Sources: []string{"s"}, Events: []string{"t"}}, nil, "s", "t", true, action{}},
		{"taken here and elsewhere", false, widened, []takes{widened}, "s", "u", true, action{}},
		{"no one's", false, takes{Sources: []string{"s"}, Events: []string{"t"}}, nil, "s", "u", false, actAck},
		{"no one's: the others take other kinds", false, takes{Sources: []string{"s"}, Events: []string{"t"}},
			[]takes{{Sources: []string{"s"}, Events: []string{"v"}}}, "s", "u", false, actAck},
		{"widened elsewhere", false, takes{Sources: []string{"s"}, Events: []string{"t"}}, []takes{widened}, "s", "u",
			false, nakFor(1500 * time.Millisecond)},
		{"narrowed here, not yet elsewhere", false, takes{Sources: []string{"s"}, Events: []string{"t"}},
			[]takes{{Sources: []string{"s"}}}, "s", "x", false, nakFor(1500 * time.Millisecond)},
		{"a source added elsewhere", false, takes{Sources: []string{"s"}, Events: []string{"t"}}, []takes{moreSources},
			"s2", "t", false, nakFor(1500 * time.Millisecond)},
		{"a source dropped here", false, takes{Sources: []string{"s2"}, Events: []string{"t"}}, []takes{moreSources},
			"s", "t", false, nakFor(1500 * time.Millisecond)},
		{"paused, taken here", true, widened, nil, "s", "t", false, nakFor(pausedRetry)},
		{"paused, no one's", true, takes{Sources: []string{"s"}}, nil, "s2", "t", false, nakFor(pausedRetry)},
	}
	for _, c := range cases {
		here := c.here.matches(c.source, c.typ)
		elsewhere := slices.ContainsFunc(c.others, func(o takes) bool { return o.matches(c.source, c.typ) })
		handle, act := triage(c.paused, here, elsewhere, 1500*time.Millisecond)
		if handle != c.handle || act != c.act {
			t.Errorf("%s: triage = %v, %+v; want %v, %+v", c.name, handle, act, c.handle, c.act)
		}
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	ok := roundResult{attempts: 1, last: store.Attempt{Status: 200}}
	fail := roundResult{attempts: 3, last: store.Attempt{Status: 503}}
	connErr := roundResult{attempts: 3, last: store.Attempt{Error: "dial tcp: refused"}, err: "dial tcp: refused"}
	gone := roundResult{attempts: 1, last: store.Attempt{Status: 410}}
	stopped := roundResult{attempts: 2, last: store.Attempt{Status: 500}, stopped: true}
	unsendable := roundResult{attempts: 1, last: store.Attempt{Error: "cannot build request: x"}, unsendable: true}
	retrying := store.DeliveryStatus{ID: 7, State: store.StateRetrying, Attempts: 3, Rounds: 1, NextAttemptAt: now.Add(-time.Second)}
	lastRound := store.DeliveryStatus{ID: 7, State: store.StateRetrying, Attempts: 6, Rounds: 2}
	dead := store.DeliveryStatus{ID: 7, State: store.StateDead, Attempts: 9, Rounds: 3}
	cases := []struct {
		name   string
		prev   store.DeliveryStatus
		res    roundResult
		manual bool
		want   decision
	}{
		{"first round succeeds", store.DeliveryStatus{}, ok, false, decision{record: true,
			next:    change{state: store.StateSucceeded, lastStatus: 200},
			outcome: outcomeSucceeded, health: healthy, then: actAck}},
		{"first round fails: the schedule's first step", store.DeliveryStatus{}, fail, false, decision{record: true,
			next:    change{state: store.StateRetrying, rounds: 1, nextAttemptAt: now.Add(time.Minute), lastStatus: 503, lastError: "Service Unavailable"},
			outcome: outcomeRetrying, health: unhealthy, then: nakUntil(now.Add(time.Minute))}},
		{"second round fails: the next step", retrying, connErr, false, decision{record: true,
			next:    change{state: store.StateRetrying, rounds: 2, nextAttemptAt: now.Add(time.Hour), lastError: "dial tcp: refused"},
			outcome: outcomeRetrying, health: unhealthy, then: nakUntil(now.Add(time.Hour))}},
		{"past the last step: dead", lastRound, fail, false, decision{record: true,
			next:    change{state: store.StateDead, rounds: 3, lastStatus: 503, lastError: "Service Unavailable"},
			outcome: outcomeDead, health: unhealthy, then: actAck}},
		{"410 Gone: dead, no word for the breaker", retrying, gone, false, decision{record: true,
			next:    change{state: store.StateDead, rounds: 1, lastStatus: 410, lastError: "Gone"},
			outcome: outcomeDead, health: noWord, then: actAck}},
		{"unsendable: dead at once", store.DeliveryStatus{}, unsendable, false, decision{record: true,
			next:    change{state: store.StateDead, lastError: "cannot build request: x"},
			outcome: outcomeDead, health: unhealthy, then: actAck}},
		{"the client's error when the attempt has none", store.DeliveryStatus{}, roundResult{attempts: 1, err: "giving up"}, false, decision{record: true,
			next:    change{state: store.StateRetrying, rounds: 1, nextAttemptAt: now.Add(time.Minute), lastError: "giving up"},
			outcome: outcomeRetrying, health: unhealthy, then: nakUntil(now.Add(time.Minute))}},
		{"stopped mid-round: state kept, handed back", retrying, stopped, false, decision{record: true,
			next: change{state: store.StateRetrying, rounds: 1, nextAttemptAt: retrying.NextAttemptAt, lastStatus: 500, lastError: "Internal Server Error"},
			then: actHandBack}},
		{"stopped before any attempt: nothing recorded", retrying, roundResult{stopped: true, err: "context canceled"}, false,
			decision{then: actHandBack}},
		{"stopped after a 2xx: recorded, still handed back", store.DeliveryStatus{}, roundResult{attempts: 1, last: store.Attempt{Status: 204}, stopped: true}, false,
			decision{record: true, next: change{state: store.StateSucceeded, lastStatus: 204}, outcome: outcomeSucceeded, then: actHandBack}},
		{"stopped, the client's error is not kept", store.DeliveryStatus{}, roundResult{attempts: 1, stopped: true, err: "context canceled"}, false,
			decision{record: true, next: change{state: store.StatePending}, then: actHandBack}},
		{"manual round fails: state and schedule kept", dead, fail, true, decision{record: true,
			next:    change{state: store.StateDead, rounds: 3, lastStatus: 503, lastError: "Service Unavailable"},
			outcome: outcomeFailed, health: unhealthy, then: actAck}},
		{"manual round fails on a retrying delivery", retrying, fail, true, decision{record: true,
			next:    change{state: store.StateRetrying, rounds: 1, nextAttemptAt: retrying.NextAttemptAt, lastStatus: 503, lastError: "Service Unavailable"},
			outcome: outcomeFailed, health: unhealthy, then: nakUntil(retrying.NextAttemptAt)}},
		{"manual round of a new delivery fails: the schedule's first step", store.DeliveryStatus{}, fail, true, decision{record: true,
			next:    change{state: store.StateRetrying, rounds: 1, nextAttemptAt: now.Add(time.Minute), lastStatus: 503, lastError: "Service Unavailable"},
			outcome: outcomeRetrying, health: unhealthy, then: nakUntil(now.Add(time.Minute))}},
		{"manual round succeeds", dead, ok, true, decision{record: true,
			next:    change{state: store.StateSucceeded, rounds: 3, lastStatus: 200},
			outcome: outcomeSucceeded, health: healthy, then: actAck}},
		{"manual round stopped: pending, for Recover", dead, stopped, true, decision{record: true,
			next: change{state: store.StatePending, rounds: 3, lastStatus: 500, lastError: "Internal Server Error"},
			then: actHandBack}},
	}
	for _, c := range cases {
		if got := decide(c.prev, c.res, schedule, now, c.manual); got != c.want {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
}

// An empty schedule: the first failed round is dead.
func TestDecideEmptySchedule(t *testing.T) {
	t.Parallel()
	d := decide(store.DeliveryStatus{}, roundResult{attempts: 1, last: store.Attempt{Status: 500}}, nil, now, false)
	if d.next.state != store.StateDead || d.outcome != outcomeDead || d.then != actAck {
		t.Fatalf("got %+v, want dead and acked", d)
	}
}

func TestUnrecorded(t *testing.T) {
	t.Parallel()
	d := decide(store.DeliveryStatus{}, roundResult{attempts: 1, last: store.Attempt{Status: 200}}, schedule, now, false)
	if got := d.unrecorded(false); got.record || got.health != noWord || got.then != nakFor(5*time.Second) {
		t.Errorf("not stopped: %+v; want a nak in 5s and no word for the breaker", got)
	}
	if got := d.unrecorded(true); got.record || got.health != noWord || got.then != actHandBack {
		t.Errorf("stopped: %+v; want a hand back", got)
	}
}

func TestWaitOf(t *testing.T) {
	t.Parallel()
	if w := waitOf(nakFor(3*time.Second), now); w != 3*time.Second {
		t.Errorf("nakFor(3s) waits %v", w)
	}
	if w := waitOf(nakUntil(now.Add(time.Minute)), now.Add(10*time.Second)); w != 50*time.Second {
		t.Errorf("nakUntil waits %v, want 50s", w)
	}
	if s := fmt.Sprint(ack, nak, term, handBack, verb(0)); s != "ack nak term hand back none" {
		t.Errorf("verbs: %s", s)
	}
}

// An operator's round, once it holds the delivery, goes on from the
// status it finds, and a retry of a delivery that succeeded since sends
// nothing.
func TestManualFrom(t *testing.T) {
	dead := store.DeliveryStatus{ID: 7, State: store.StateDead, Attempts: 3}
	retried := store.DeliveryStatus{ID: 7, State: store.StateRetrying, Attempts: 4}
	done := store.DeliveryStatus{ID: 7, State: store.StateSucceeded, Attempts: 4}
	doneSameCount := store.DeliveryStatus{ID: 7, State: store.StateSucceeded, Attempts: 3}
	unavailable := errors.New("unavailable")
	for _, c := range []struct {
		name    string
		cur     store.DeliveryStatus
		err     error
		resend  bool
		want    store.DeliveryStatus
		wantRun bool
	}{
		{"unchanged", dead, nil, false, dead, true},
		{"a round recorded meanwhile", retried, nil, false, retried, true},
		{"succeeded meanwhile: retry", done, nil, false, dead, false},
		{"succeeded, same attempts (a store behind): retry", doneSameCount, nil, false, dead, false},
		{"succeeded meanwhile: replay", done, nil, true, done, true},
		{"no delivery yet", store.DeliveryStatus{}, store.ErrNotFound, true, dead, true},
		{"unavailable: retry", store.DeliveryStatus{}, unavailable, false, dead, false},
		{"unavailable: replay", store.DeliveryStatus{}, unavailable, true, dead, true},
	} {
		got, run := manualFrom(dead, c.cur, c.err, c.resend)
		if got != c.want || run != c.wantRun {
			t.Errorf("%s: %+v, %v; want %+v, %v", c.name, got, run, c.want, c.wantRun)
		}
	}
}
