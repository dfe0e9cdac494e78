// Package startstop is the lifecycle every long-running service of the
// gateway shares: Start(ctx) error starts it, Stop(ctx) error stops it,
// and a second Stop, or a Stop without Start, does nothing.
//
// Loop is that lifecycle for a service that is one goroutine: Start runs
// it, Stop cancels its context and waits for it to return.
package startstop

import (
	"context"
	"sync"
)

// Service is the shape of every long-running service. Stop is safe to
// call twice, and before or without Start.
type Service interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// Stopper is what is left to do with a started service.
type Stopper interface {
	Stop(ctx context.Context) error
}

// Loop runs one goroutine from Start until Stop. The zero Loop is ready.
type Loop struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs run in a goroutine of its own, with a context that ends at
// Stop (not with ctx, whose values it keeps). Starting a running loop does
// nothing; a stopped loop starts anew.
func (l *Loop) Start(ctx context.Context, run func(ctx context.Context)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancel != nil {
		return
	}
	ctx, l.cancel = context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	l.done = done
	go func() {
		defer close(done)
		run(ctx)
	}()
}

// Stop cancels the goroutine's context and waits for it to return. The
// wait is not cut short: the services using Loop end quickly once
// cancelled, and what they still write (with a context of their own)
// must be done before the store under them closes. Safe to call twice,
// and without Start.
func (l *Loop) Stop() {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.cancel, l.done = nil, nil
	l.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}
