package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// The pauses bucket deleted while a gateway watches it, nobody pausing
// anything, is made again by the watch at its next check, and the routes
// the gateway's store has paused are written to it again; its check fails
// while it is gone, naming it.
func TestPausesBucketGoneMadeAgain(t *testing.T) {
	srv := gatewaytest.RunNATS(t, 0, t.TempDir())
	js := connect(t, srv.ClientURL())
	ctx := context.Background()
	routes := &pausedRoutes{paused: map[string]bool{}, stored: []string{"old"}}
	p := startPauses(t, js, "gw-1", routes)
	if err := p.Check(ctx); err != nil {
		t.Fatalf("check: %v", err)
	}
	if err := js.DeleteKeyValue(ctx, DefaultPausesBucket); err != nil {
		t.Fatal(err)
	}
	if err := p.Check(ctx); err == nil || !strings.Contains(err.Error(), DefaultPausesBucket) {
		t.Errorf("check without the bucket: %v; want an error naming it", err)
	}
	gatewaytest.WaitFor(t, "the bucket made again, the stored pause in it", 30*time.Second, func() (bool, string) {
		kv, err := js.KeyValue(ctx, DefaultPausesBucket)
		if err != nil {
			return false, fmt.Sprint(err)
		}
		_, err = kv.Get(ctx, "old")
		return err == nil, fmt.Sprint(err)
	})
	if err := p.Check(ctx); err != nil {
		t.Errorf("check once made again: %v", err)
	}
}
