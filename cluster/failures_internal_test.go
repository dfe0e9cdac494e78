package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// "No responders" (the bucket's stream has no leader yet) is logged at
// debug level for noLeaderGrace, then warned; another error is warned at
// once; an answer ends the run.
func TestFailuresLevel(t *testing.T) {
	var f failures
	t0 := time.Unix(1000, 0)
	noLeader := fmt.Errorf("cluster: read delivery state: %w", nats.ErrNoResponders)
	for _, step := range []struct {
		err  error
		at   time.Duration
		want slog.Level
	}{
		{noLeader, 0, slog.LevelDebug},
		{noLeader, noLeaderGrace - time.Millisecond, slog.LevelDebug},
		{noLeader, noLeaderGrace, slog.LevelWarn},
		{errLeased, noLeaderGrace + time.Second, slog.LevelDebug}, // an answer
		{noLeader, noLeaderGrace + 2*time.Second, slog.LevelDebug},
		{errors.New("permission denied"), noLeaderGrace + 3*time.Second, slog.LevelWarn},
		{nil, noLeaderGrace + 4*time.Second, slog.LevelDebug},
		{noLeader, 3 * noLeaderGrace, slog.LevelDebug},
	} {
		if got := f.level(step.err, t0.Add(step.at)); got != step.want {
			t.Errorf("%v at %s: level %s, want %s", step.err, step.at, got, step.want)
		}
	}
}
