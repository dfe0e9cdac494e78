package store

import (
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// tail keeps the newest part of the outbox in memory: copies of the events
// the writer's commits just added, so that Unpublished serves the relay
// without reading back what was written a moment ago (a query, and two
// copies of each body, per event).
//
// It is used only while it is known to hold every outbox row after floor.
// It gets there when a query of the table reads the whole outbox after a
// seq (see arm and armed); a commit of any write that may queue events
// other than claims (a task, a requeue: every write not marked as leaving
// the outbox alone), or more than tailMaxBytes held, turns it off until the
// next query catches up.
type tail struct {
	mu    sync.Mutex
	state tailState
	gen   uint64  // advanced by each reset: an arm from before is void
	floor int64   // valid: every outbox row with seq > floor is in evs
	evs   []Event // seq ascending, each > floor; detached copies
	bytes int

	hits atomic.Int64 // reads served from memory (for tests)
}

type tailState int

const (
	tailOff    tailState = iota // reads query the table
	tailArming                  // a query runs; commits are kept from now on
	tailValid                   // reads after floor are served from evs
)

// tailMaxBytes bounds the copies held while the relay does not read them
// (NATS down, a slow pass): past it the tail is off until it catches up.
const tailMaxBytes = 8 << 20

// read returns the events after seq after, up to limit, when the tail can
// answer for the table; ok is false when the table must be queried. A read
// from the start (after 0: the relay starting a pass over) always queries,
// so that a pass sees whatever the table holds.
func (t *tail) read(after int64, limit int) (evs []Event, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state != tailValid || after <= 0 || after < t.floor {
		return nil, false
	}
	// The caller is past after: what is at or before it is not asked again.
	i := 0
	for i < len(t.evs) && t.evs[i].Seq <= after {
		t.bytes -= eventBytes(&t.evs[i])
		i++
	}
	t.evs = t.evs[i:]
	t.floor = after
	n := min(limit, len(t.evs))
	evs = make([]Event, n)
	copy(evs, t.evs[:n])
	t.hits.Add(1)
	return evs, true
}

// arm starts keeping commits, before a query of the table; it returns the
// generation to hand to armed.
func (t *tail) arm() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.state, t.evs, t.bytes = tailArming, nil, 0
	return t.gen
}

// armed is called when a query, begun after arm returned gen, read every
// outbox row after floor: from now on the tail answers after floor, unless
// a reset came in between.
func (t *tail) armed(gen uint64, floor int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.gen != gen || t.state != tailArming {
		return
	}
	i := 0
	for i < len(t.evs) && t.evs[i].Seq <= floor {
		t.bytes -= eventBytes(&t.evs[i])
		i++
	}
	t.evs = t.evs[i:]
	t.state, t.floor = tailValid, floor
}

// reset turns the tail off. Callers hold mu.
func (t *tail) reset() {
	t.state, t.evs, t.bytes = tailOff, nil, 0
	t.gen++
}

// committed takes in a batch the writer committed (ok) or failed, before
// its ops are handed back: the claims' bytes are the callers' again after.
func (t *tail) committed(batch []*op, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state == tailOff {
		return
	}
	for _, o := range batch {
		switch {
		case o.claim != nil:
			if ok && !o.dup {
				ev := detach(o.claim)
				t.evs = append(t.evs, ev)
				t.bytes += eventBytes(&ev)
			}
		case o.round != nil, o.outboxSafe:
		default: // may have queued events the tail cannot see
			t.reset()
			return
		}
	}
	if t.bytes > tailMaxBytes {
		t.reset()
	}
}

// detach copies what a message carries of ev into one allocation of its
// own; its strings point into that copy, which nothing writes again.
func detach(ev *Event) Event {
	buf := make([]byte, 0, eventBytes(ev))
	buf = append(buf, ev.Body...)
	buf = append(buf, ev.Source...)
	buf = append(buf, ev.ID...)
	buf = append(buf, ev.Type...)
	buf = append(buf, ev.ContentType...)
	at := len(ev.Body)
	str := func(n int) string {
		if n == 0 {
			return ""
		}
		s := unsafe.String(&buf[at], n) //nolint:gosec // G103: buf is this event's own copy, never written again (see above)
		at += n
		return s
	}
	return Event{
		Seq:         ev.Seq,
		Body:        buf[:len(ev.Body):len(ev.Body)],
		Source:      str(len(ev.Source)),
		ID:          str(len(ev.ID)),
		Type:        str(len(ev.Type)),
		ContentType: str(len(ev.ContentType)),
		ReceivedAt:  time.UnixMilli(ev.ReceivedAt.UnixMilli()), // as stored
	}
}

func eventBytes(ev *Event) int {
	return len(ev.Body) + len(ev.Source) + len(ev.ID) + len(ev.Type) + len(ev.ContentType)
}
