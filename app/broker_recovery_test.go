package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
)

// countingDownstream answers 200 and counts the distinct event IDs it got.
func countingDownstream(t *testing.T) (*httptest.Server, func() int) {
	var n atomic.Int64
	seen := make(chan string, 10000)
	got := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		seen <- r.Header.Get("X-Hookgate-Event-Id")
	}))
	t.Cleanup(srv.Close)
	return srv, func() int {
		for {
			select {
			case id := <-seen:
				got[id] = true
			default:
				return len(got)
			}
		}
	}
}

// The JetStream store's disk fills up and is freed again while the gateway
// runs: /readyz/delivery fails once the oldest unpublished event is older
// than nats.outbox_max_age, naming its age, and the age is exported;
// publishing resumes without a restart, and /readyz/delivery is 200 again;
// /readyz fails on the outbox's age too, and is 200 again after.
func TestBrokerRecoversFromFullDisk(t *testing.T) {
	mnt := filepath.Join(t.TempDir(), "js")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=8m"); err != nil {
		t.Skipf("cannot mount a tmpfs (needs root or CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() {
		if syscall.Unmount(mnt, 0) != nil {
			syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	})
	ds, delivered := countingDownstream(t)
	cfg := testConfig(t, fmt.Sprintf(`
nats: {store_dir: %q, outbox_max_age: 2s}
routes:
  - {name: billing, sources: [stripe], url: %q}
`, mnt, ds.URL))
	a := startApp(t, cfg)
	for i := range 5 {
		if code, body := postStripe(t, a, fmt.Sprintf("evt_before_%d", i)); code != 200 {
			t.Fatalf("post: %d %s", code, body)
		}
	}
	waitFor(t, "5 delivered", func() (bool, string) { n := delivered(); return n == 5, fmt.Sprint(n) })
	filler := filepath.Join(mnt, "filler")
	if err := fillDisk(filler); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if code, body := postStripe(t, a, fmt.Sprintf("evt_full_%d", i)); code != 200 {
			t.Fatalf("post: %d %s", code, body)
		}
	}
	waitFor(t, "/readyz/delivery 503 on the outbox's age", func() (bool, string) {
		code, r := delivery(t, a)
		c := r.check("outbox")
		return code == 503 && !c.OK && strings.Contains(c.Reason, "old"), fmt.Sprintf("%d %+v", code, r)
	})
	if age := value(scrape(t, a, ""), "hookgate_outbox_oldest_age_seconds"); age < 2 {
		t.Fatalf("hookgate_outbox_oldest_age_seconds = %v while /readyz/delivery says it is over 2s", age)
	}
	if code, r := ready(t, a); code != 503 || r.check("outbox").OK || !r.check("store").OK {
		t.Fatalf("/readyz while the JetStream disk is full and the outbox is over 2s old = %d %+v, want 503 on outbox", code, r)
	}
	t.Logf("while full: %d delivered", delivered())
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if code, body := postStripe(t, a, fmt.Sprintf("evt_after_%d", i)); code != 200 {
			t.Fatalf("post: %d %s", code, body)
		}
	}
	waitFor(t, "30 delivered", func() (bool, string) { n := delivered(); return n == 30, fmt.Sprint(n) })
	waitFor(t, "/readyz/delivery 200 again", func() (bool, string) {
		code, r := delivery(t, a)
		return code == 200, fmt.Sprintf("%d %+v", code, r)
	})
	waitFor(t, "/readyz 200 again", func() (bool, string) {
		code, r := ready(t, a)
		return code == 200, fmt.Sprintf("%d %+v", code, r)
	})
	if age := value(scrape(t, a, ""), "hookgate_outbox_oldest_age_seconds"); age != 0 {
		t.Fatalf("hookgate_outbox_oldest_age_seconds = %v with the outbox empty", age)
	}
}

// The embedded JetStream store's directory is removed while the gateway
// runs: publishing resumes without a restart.
func TestBrokerRecoversFromRemovedStore(t *testing.T) {
	ds, delivered := countingDownstream(t)
	cfg := testConfig(t, fmt.Sprintf(`
routes:
  - {name: billing, sources: [stripe], url: %q}
`, ds.URL))
	a := startApp(t, cfg)
	for i := range 5 {
		if code, body := postStripe(t, a, fmt.Sprintf("evt_before_%d", i)); code != 200 {
			t.Fatalf("post: %d %s", code, body)
		}
	}
	waitFor(t, "5 delivered", func() (bool, string) { n := delivered(); return n == 5, fmt.Sprint(n) })
	if err := os.RemoveAll(cfg.NATS.StoreDir); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if code, body := postStripe(t, a, fmt.Sprintf("evt_after_%d", i)); code != 200 {
			t.Fatalf("post: %d %s", code, body)
		}
	}
	waitFor(t, "25 delivered", func() (bool, string) { n := delivered(); return n == 25, fmt.Sprint(n) })
}

// fillDisk writes to path until the file system is full.
func fillDisk(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, size := range []int{1 << 20, 4 << 10, 1} {
		buf := make([]byte, size)
		for {
			if _, err := f.Write(buf); err != nil {
				if errors.Is(err, syscall.ENOSPC) {
					break
				}
				return err
			}
		}
	}
	return nil
}

// The events stream is deleted on an external server while the gateway
// runs: it is created again with every route's consumer, and the events
// published meanwhile, as the ones after, are delivered.
func TestStreamDeletedWhileRunning(t *testing.T) {
	ds, delivered := countingDownstream(t)
	srv := runNATS(t, 0, t.TempDir())
	cfg := testConfig(t, fmt.Sprintf(`
nats: {url: %q, connect_timeout: 2s}
routes:
  - {name: billing, sources: [stripe], url: %q}
`, srv.ClientURL(), ds.URL))
	a := startApp(t, cfg)
	for i := range 5 {
		if code, body := postStripe(t, a, fmt.Sprintf("evt_before_%d", i)); code != 200 {
			t.Fatalf("post: %d %s", code, body)
		}
	}
	waitFor(t, "5 delivered", func() (bool, string) { n := delivered(); return n == 5, fmt.Sprint(n) })
	if err := a.Broker().JetStream().DeleteStream(context.Background(), a.Broker().Stream()); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if code, body := postStripe(t, a, fmt.Sprintf("evt_after_%d", i)); code != 200 {
			t.Fatalf("post: %d %s", code, body)
		}
	}
	waitFor(t, "25 delivered", func() (bool, string) { n := delivered(); return n == 25, fmt.Sprint(n) })
	waitFor(t, "ready", func() (bool, string) {
		code, r := delivery(t, a)
		return code == 200, fmt.Sprintf("%d %+v", code, r)
	})
}

// The events stream is deleted while no event arrives: the idle relay
// notices, creates it again with its consumers, and /readyz/delivery is 200 again
// without a restart and without waiting for the next event.
func TestStreamDeletedWhileIdle(t *testing.T) {
	ds, delivered := countingDownstream(t)
	srv := runNATS(t, 0, t.TempDir())
	cfg := testConfig(t, fmt.Sprintf(`
nats: {url: %q, connect_timeout: 2s}
routes:
  - {name: billing, sources: [stripe], url: %q}
`, srv.ClientURL(), ds.URL))
	a := startApp(t, cfg)
	if code, body := postStripe(t, a, "evt_before"); code != 200 {
		t.Fatalf("post: %d %s", code, body)
	}
	waitFor(t, "delivered", func() (bool, string) { n := delivered(); return n == 1, fmt.Sprint(n) })
	if err := a.Broker().JetStream().DeleteStream(context.Background(), a.Broker().Stream()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "not ready", func() (bool, string) {
		code, r := delivery(t, a)
		return code == 503, fmt.Sprintf("%d %+v", code, r)
	})
	waitFor(t, "ready again", func() (bool, string) {
		code, r := delivery(t, a)
		return code == 200, fmt.Sprintf("%d %+v", code, r)
	})
	if code, body := postStripe(t, a, "evt_after"); code != 200 {
		t.Fatalf("post: %d %s", code, body)
	}
	waitFor(t, "delivered", func() (bool, string) { n := delivered(); return n == 2, fmt.Sprint(n) })
}
