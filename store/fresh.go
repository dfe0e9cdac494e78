package store

import (
	"encoding/binary"
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// fresh answers the delivery engine's lookup (DeliveryStatus) without the
// writer in the usual case: an event this process stored a moment ago,
// with no round to the route recorded yet. The writer notes each event its
// commits claim and each route a committed round delivered it to; the
// lookup of such an event for a route with no round is then "not found"
// at once, instead of two queries between two commits (a lookup waits for
// the commit under way, then for its turn on the writer's connection).
//
// An answer from memory is the one the queries would give: the entry is
// the event of that seq here (by a 128-bit hash of its source and ID), and
// every delivery row of it was written by a round this process noted. Any
// other write that could add a delivery row or remove an event (an
// operator's action, a replica's records, retention, an adopted event)
// empties it, as does a failed commit; what it does not hold (an older or
// overwritten seq, a 65th route) is asked of the writer, as before.
type fresh struct {
	mu     sync.Mutex
	ring   []freshEntry     // by seq modulo its length
	gen    uint64           // an entry of another generation is empty
	off    bool             // the store closed: the writer answers (that it is closed)
	routes map[string]uint8 // a bit of freshEntry.done per route, up to 64
	seeds  [2]maphash.Seed

	hits atomic.Int64 // lookups answered from memory (for tests)
}

// freshEntry is one event a commit claimed. Plain integers: the garbage
// collector does not scan the ring.
type freshEntry struct {
	seq     int64 // 0: empty
	gen     uint64
	id, id2 uint64
	done    uint64 // bit of each route with a delivery row (all: unknown)
}

// freshEvents is how many of the newest claimed events are held (40 bytes
// each): the undelivered backlog of a few seconds at the peak.
const freshEvents = 1 << 17

func newFresh(n int) *fresh {
	return &fresh{ring: make([]freshEntry, n), routes: map[string]uint8{},
		seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}}
}

// identity is the hash pair of an event's source and ID.
func (f *fresh) identity(source, eventID string) (uint64, uint64) {
	var h [2]uint64
	for i, seed := range f.seeds {
		var mh maphash.Hash
		mh.SetSeed(seed)
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(source)))
		mh.Write(n[:]) // length-prefixed: ("a", "b\x00c") is not ("a\x00b", "c")
		mh.WriteString(source)
		mh.WriteString(eventID)
		h[i] = mh.Sum64()
	}
	return h[0], h[1]
}

// routeBit is route's bit, given one if it has none and fewer than 64 are
// given; ok is false past that. Callers hold mu.
func (f *fresh) routeBit(route string) (uint64, bool) {
	b, ok := f.routes[route]
	if !ok {
		if len(f.routes) == 64 {
			return 0, false
		}
		b = uint8(len(f.routes))
		f.routes[route] = b
	}
	return 1 << b, true
}

// absent reports whether event seq, of source and eventID, is known to
// have no delivery to route: DeliveryStatus's ErrNotFound. False means
// unknown.
func (f *fresh) absent(route string, seq int64, source, eventID string) bool {
	if seq <= 0 {
		return false
	}
	id, id2 := f.identity(source, eventID)
	f.mu.Lock()
	defer f.mu.Unlock()
	e := &f.ring[seq%int64(len(f.ring))]
	if f.off || e.seq != seq || e.gen != f.gen || e.id != id || e.id2 != id2 {
		return false
	}
	bit, ok := f.routeBit(route)
	if !ok || e.done&bit != 0 {
		return false
	}
	f.hits.Add(1)
	return true
}

// committed takes in a batch the writer committed (ok) or failed, before
// its ops are handed back (so before a round's caller may look again).
func (f *fresh) committed(batch []*op, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !ok {
		f.reset()
		return
	}
	for _, o := range batch {
		switch {
		case o.claim != nil:
			if o.dup || o.claim.Seq <= 0 {
				continue
			}
			id, id2 := f.identity(o.claim.Source, o.claim.ID)
			f.ring[o.claim.Seq%int64(len(f.ring))] = freshEntry{seq: o.claim.Seq, gen: f.gen, id: id, id2: id2}
		case o.round != nil:
			if o.round.EventSeq <= 0 {
				continue
			}
			e := &f.ring[o.round.EventSeq%int64(len(f.ring))]
			if e.seq != o.round.EventSeq || e.gen != f.gen {
				continue
			}
			if bit, ok := f.routeBit(o.round.Route); ok {
				e.done |= bit
			} else {
				e.done = ^uint64(0)
			}
		case o.published != nil, o.freshSafe:
		default: // may have added a delivery row or removed an event
			f.reset()
			return
		}
	}
}

// stop turns it off for good, at Close.
func (f *fresh) stop() {
	f.mu.Lock()
	f.off = true
	f.mu.Unlock()
}

// reset forgets every event. Callers hold mu.
func (f *fresh) reset() { f.gen++ }
