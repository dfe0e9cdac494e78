package outbound_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/hookgate/hookgate/outbound"
)

// Stop is safe before Start, after it, and twice; each returns nil.
func TestStopTwiceAndWithoutStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := outbound.New(nil, nil, nil, outbound.Config{}, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Stop(ctx); err != nil {
		t.Fatalf("stop before start: %v", err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := e.Stop(ctx); err != nil {
			t.Fatalf("stop %d: %v", i+1, err)
		}
	}
}
