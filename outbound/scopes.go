package outbound

import (
	"context"
	"sync"
	"time"
)

// taskScoper tells which token scope submitted a task.
type taskScoper interface {
	TaskScope(ctx context.Context, id string) (string, error)
}

// scopeSlots bounds the rounds of one token scope's tasks in flight, so
// that one task client (say, with tasks to a host that never answers)
// cannot hold every task worker and stall the others' tasks.
type scopeSlots struct {
	most int
	mu   sync.Mutex
	busy map[string]int // rounds in flight by scope ("" for a task whose scope is unknown here)
}

func newScopeSlots(most int) *scopeSlots {
	return &scopeSlots{most: max(most, 1), busy: map[string]int{}}
}

// take takes a slot of scope; false if its rounds in flight are at most.
func (s *scopeSlots) take(scope string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy[scope] >= s.most {
		return false
	}
	s.busy[scope]++
	return true
}

// give gives back a slot take took.
func (s *scopeSlots) give(scope string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy[scope]--; s.busy[scope] <= 0 {
		delete(s.busy, scope)
	}
}

// scopeBusyRetry is when a task whose scope has no free slot comes back.
const scopeBusyRetry = 2 * time.Second
