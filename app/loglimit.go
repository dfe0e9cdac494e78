package app

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Repeated records at WARN and above are limited per (level, message):
// the first logBurst of a kind in each logWindow are written, the rest
// dropped, and when the window ends one record says how many were. The
// /metrics counters stay the record of what happened.
const (
	logWindow = 10 * time.Second
	logBurst  = 5
	// logMaxKinds bounds the kinds tracked at once (messages are constants
	// of the code, so few); records of further kinds pass unlimited.
	logMaxKinds = 1024
)

// limitClock is the limiter's time: real in production, a test's own in
// tests.
type limitClock struct {
	now       func() time.Time
	afterFunc func(d time.Duration, f func())
}

var realClock = limitClock{
	now:       time.Now,
	afterFunc: func(d time.Duration, f func()) { time.AfterFunc(d, f) },
}

// limiter is shared by a limitHandler and the handlers derived from it.
type limiter struct {
	clock  limitClock
	window time.Duration
	burst  int

	mu    sync.Mutex
	kinds map[limitKind]*limitWindow
}

type limitKind struct {
	level slog.Level
	msg   string
}

// limitWindow is one kind's current window; it ends logWindow after its
// first record.
type limitWindow struct {
	passed, dropped int
	via             slog.Handler // handler of the first dropped record: the summary keeps its attributes
}

// limitHandler is a slog.Handler that limits repeated records at WARN and
// above (see logWindow); lower levels pass through.
type limitHandler struct {
	inner slog.Handler
	l     *limiter
}

func newLimitHandler(inner slog.Handler, clock limitClock, window time.Duration, burst int) *limitHandler {
	return &limitHandler{inner: inner, l: &limiter{clock: clock, window: window, burst: burst,
		kinds: map[limitKind]*limitWindow{}}}
}

func (h *limitHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.inner.Enabled(ctx, level)
}

func (h *limitHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn || h.l.allow(h.inner, r) {
		return h.inner.Handle(ctx, r)
	}
	return nil
}

func (h *limitHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &limitHandler{inner: h.inner.WithAttrs(attrs), l: h.l}
}

func (h *limitHandler) WithGroup(name string) slog.Handler {
	return &limitHandler{inner: h.inner.WithGroup(name), l: h.l}
}

// allow counts r against its kind's window and reports whether to write it.
func (l *limiter) allow(via slog.Handler, r slog.Record) bool {
	k := limitKind{r.Level, r.Message}
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.kinds[k]
	if w == nil {
		if len(l.kinds) >= logMaxKinds {
			return true
		}
		w = &limitWindow{}
		l.kinds[k] = w
		l.clock.afterFunc(l.window, func() { l.end(k, w) })
	}
	if w.passed < l.burst {
		w.passed++
		return true
	}
	if w.dropped == 0 {
		w.via = via
	}
	w.dropped++
	return false
}

// end closes a kind's window and writes how many records it dropped.
func (l *limiter) end(k limitKind, w *limitWindow) {
	l.mu.Lock()
	if l.kinds[k] == w {
		delete(l.kinds, k)
	}
	n, via := w.dropped, w.via
	l.mu.Unlock()
	if n == 0 {
		return
	}
	r := slog.NewRecord(l.clock.now(), k.level, fmt.Sprintf("%d more like this in the last %s", n, l.window), 0)
	r.AddAttrs(slog.String("message", k.msg))
	_ = via.Handle(context.Background(), r)
}
