package outbound

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// A fetch finding no responders (the consumer has no leader yet) is
// logged at debug level for noLeaderGrace, then warned; another error is
// warned at once.
func TestNoLeaderRunLevel(t *testing.T) {
	var r noLeaderRun
	t0 := time.Unix(1000, 0)
	if got := r.level(nats.ErrNoResponders, t0); got != slog.LevelDebug {
		t.Errorf("first no responders: %s, want DEBUG", got)
	}
	if got := r.level(nats.ErrNoResponders, t0.Add(noLeaderGrace-time.Millisecond)); got != slog.LevelDebug {
		t.Errorf("no responders within the grace: %s, want DEBUG", got)
	}
	if got := r.level(nats.ErrNoResponders, t0.Add(noLeaderGrace)); got != slog.LevelWarn {
		t.Errorf("no responders past the grace: %s, want WARN", got)
	}
	if got := (&noLeaderRun{}).level(errors.New("consumer deleted"), t0); got != slog.LevelWarn {
		t.Errorf("another error: %s, want WARN", got)
	}
}
