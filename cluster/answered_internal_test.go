package cluster

import (
	"context"
	"errors"
	"testing"
)

// A request cut by an election is made again at once; an error of its
// own, or the caller's context ending, is returned as it is.
func TestAnsweredAfterElections(t *testing.T) {
	elections := 0
	cutTwice := UntilElected(func(ctx context.Context, _ string) (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithCancel(ctx)
		if elections < 2 {
			elections++
			cancel() // an election during the request
		}
		return ctx, cancel
	})
	var tries int
	req := func(ctx context.Context) error {
		tries++
		return ctx.Err()
	}
	if err := cutTwice.answered(context.Background(), "KV_B", req); err != nil || tries != 3 {
		t.Fatalf("answered: %v after %d tries; want nil after 3", err, tries)
	}

	refused := errors.New("refused")
	tries = 0
	if err := UntilElected(nil).answered(context.Background(), "KV_B", func(context.Context) error { tries++; return refused }); !errors.Is(err, refused) || tries != 1 {
		t.Fatalf("answered: %v after %d tries; want refused after 1", err, tries)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tries = 0
	if err := UntilElected(nil).answered(ctx, "KV_B", req); !errors.Is(err, context.Canceled) || tries != 1 {
		t.Fatalf("answered with its context ended: %v after %d tries; want canceled after 1", err, tries)
	}
}
