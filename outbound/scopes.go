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

// scopeSlots counts something of each token scope's tasks (the task
// route's rounds in flight, its operators' rounds queued), at most most a
// scope, so that one task client (say, with tasks to a host that never
// answers) cannot hold every task worker and stall the others' tasks.
type scopeSlots struct {
	most int
	mu   sync.Mutex
	busy map[string]int // by scope ("" for a task whose scope is unknown here)
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

// add counts one more of scope's, past most too (an operator's retry,
// counted against the scope's own).
func (s *scopeSlots) add(scope string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy[scope]++
}

// full reports whether scope's rounds in flight are at most.
func (s *scopeSlots) full(scope string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.busy[scope] >= s.most
}

// wait takes a slot of scope, waiting for one; false if ctx ends first.
func (s *scopeSlots) wait(ctx context.Context, scope string) bool {
	for !s.take(scope) {
		if !sleep(ctx, scopePoll) {
			return false
		}
	}
	return true
}

// scopePoll is how often an operator's round of a task looks for a slot.
const scopePoll = 100 * time.Millisecond

// give gives back a slot take took.
func (s *scopeSlots) give(scope string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy[scope]--; s.busy[scope] <= 0 {
		delete(s.busy, scope)
	}
}

// scopeBusyRetry is when a task whose scope has no free slot comes back,
// the first time; then a step later each time, up to scopeBusyMax, so a
// client's backlog does not cycle through the workers.
const (
	scopeBusyRetry = 2 * time.Second
	scopeBusyMax   = 30 * time.Second
)

// scopeBusyWait is when a task found its scope full for the n-th time
// (its message's deliveries) comes back.
func scopeBusyWait(n uint64) time.Duration {
	return min(time.Duration(max(n, 1))*scopeBusyRetry, scopeBusyMax)
}
