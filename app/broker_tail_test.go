package app

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// An external NATS server that comes back with the tail of the stream
// lost (a crash inside its fsync interval: the same stream, a lower last
// sequence) while the gateway runs: the events the gateway had published
// into that tail are published again and delivered, whether later events
// take their stream sequences again or the gateway is idle (its look at
// the stream finds it ending before what it acknowledged). (Recovery
// compared only the stream's creation time while running: they were
// never delivered.)
func TestStreamTailLostWhileRunning(t *testing.T) {
	t.Run("more events", func(t *testing.T) { streamTailLost(t, true) })
	t.Run("idle", func(t *testing.T) { streamTailLost(t, false) })
}

func streamTailLost(t *testing.T, more bool) {
	dir := t.TempDir()
	live, saved := filepath.Join(dir, "live"), filepath.Join(dir, "saved")
	port := gatewaytest.FreePort(t)
	srv := gatewaytest.RunNATS(t, port, live)
	restartNATS := func(restore bool) {
		t.Helper()
		srv.Shutdown()
		srv.WaitForShutdown()
		if restore {
			if err := os.RemoveAll(live); err != nil {
				t.Fatal(err)
			}
			if err := os.CopyFS(live, os.DirFS(saved)); err != nil {
				t.Fatal(err)
			}
		} else if err := os.CopyFS(saved, os.DirFS(live)); err != nil {
			t.Fatal(err)
		}
		srv = gatewaytest.RunNATS(t, port, live)
	}

	ds, delivered := countingDownstream(t)
	const token = "operator-token-0123456789abcdef"
	a := startApp(t, testConfig(t, fmt.Sprintf(`
nats: {url: "nats://127.0.0.1:%d", connect_timeout: 5s, duplicate_window: 1s}
api: {tokens: [%q]}
routes:
  - {name: billing, sources: [stripe], url: %q}
`, port, token, ds.URL)))
	api := func(path string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+a.Addr()+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("POST %s: %v %v", path, resp, err)
		}
		resp.Body.Close()
	}
	api("/v1/routes/billing/pause")
	post := func(ids ...string) {
		t.Helper()
		for _, id := range ids {
			if code, body := postStripe(t, a, id); code != 200 {
				t.Fatalf("post %s: %d %s", id, code, body)
			}
		}
		waitFor(t, "the outbox published", func() (bool, string) {
			_, ok, err := a.Store().OutboxOldest(context.Background())
			return !ok && err == nil, fmt.Sprint(ok, err)
		})
	}
	post("evt_1", "evt_2")
	restartNATS(false) // saved: the stream with evt_1 and evt_2
	post("evt_3", "evt_4", "evt_5")
	restartNATS(true) // the stream lost evt_3 to evt_5
	want := 5
	if more {
		post("evt_6", "evt_7", "evt_8")
		want = 8
	}
	api("/v1/routes/billing/resume")
	waitFor(t, "every event delivered", func() (bool, string) {
		n := delivered()
		return n == want, fmt.Sprintf("%d of %d delivered", n, want)
	})
}
