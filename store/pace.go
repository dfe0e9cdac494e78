package store

import (
	"context"
	"database/sql"
)

// pacedRounds is how many delivery rounds a group commit takes beyond one
// per intake claim in it while claims are in it: a delivery backlog
// catching up (after a restart under load, say) then shares the commits
// and the CPU with intake instead of taking most of both. A batch without
// claims takes every round queued.
const pacedRounds = 4

// pace splits a batch the writer drained: what to commit now (in place,
// in batch's order) and the delivery rounds put off to a later commit,
// appended to held. While claims are in the batch it keeps at most
// claims+pacedRounds rounds, the first ones (the writer puts the rounds
// held last time at the front, so none waits behind newer ones: every
// commit takes at least pacedRounds of them, and a round waits at most
// held/pacedRounds commits).
func pace(batch, held []*op) (now, later []*op) {
	claims := 0
	for _, o := range batch {
		if o.claim != nil {
			claims++
		}
	}
	if claims == 0 {
		return batch, held
	}
	rounds := 0
	now = batch[:0]
	for _, o := range batch {
		if o.paced {
			if rounds == claims+pacedRounds {
				held = append(held, o)
				continue
			}
			rounds++
		}
		now = append(now, o)
	}
	clear(batch[len(now):]) // the held ops are in held
	return now, held
}

// writeRound is write for the record of a delivery round: pace may put it
// off to a later commit while intake claims wait.
func (s *Store) writeRound(ctx context.Context, fn func(*sql.Tx) error) error {
	o := getOp()
	o.fn, o.outboxSafe, o.paced = fn, true, true
	err := s.submit(ctx, o)
	putOp(o)
	return err
}
