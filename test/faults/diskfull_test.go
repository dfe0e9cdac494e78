package faults

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Scenario 5: the SQLite disk refuses writes. The database lives on a
// small tmpfs (the JetStream store does not); once intake is running, the
// tmpfs is filled to the last byte. Intake must answer 503 (never 2xx for
// what it could not store, never crash); an event answered 503 is not in
// the database, one answered 2xx is; once space is freed, without a
// restart, every refused event is accepted as new (nothing was
// half-written) and everything is delivered.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	mnt := filepath.Join(t.TempDir(), "db")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=16m"); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (needs root or CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() {
		if syscall.Unmount(mnt, 0) != nil {
			syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	})
	s := newScenario(t, func(c *gwConfig) { c.StorePath = filepath.Join(mnt, "hookgate.db") })
	before := s.newEvents("f0", 100, 0)
	during := s.newEvents("f1", 400, 8<<10) // 8 KiB more each: the store must grow
	after := s.newEvents("f2", 100, 0)
	s.ds.setLatency(200 * time.Millisecond) // deliveries still running when the disk fills
	s.start()
	s.provider.start(8, 5*time.Millisecond)
	s.forger.run(append(append(before, during...), after...))
	s.provider.add(before...)
	if err := s.provider.waitIdle(60 * time.Second); err != nil {
		t.Fatal(err)
	}

	filler := filepath.Join(mnt, "filler")
	if err := fill(filler); err != nil {
		t.Fatalf("fill the tmpfs: %v", err)
	}
	t.Logf("tmpfs full")

	// Each event of during is sent once, by 4 senders, until 20 answers in
	// a row were 503.
	var mu sync.Mutex
	answers := map[string]answer{}
	refusedRun, refused := 0, []*event{}
	var wg sync.WaitGroup
	queue := make(chan *event, len(during))
	for _, ev := range during {
		queue <- ev
	}
	close(queue)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev := range queue {
				mu.Lock()
				stop := refusedRun >= 20
				mu.Unlock()
				if stop {
					return
				}
				a, err := s.provider.send(s.provider.clients[i], ev)
				mu.Lock()
				switch {
				case err != nil:
					t.Errorf("%s while the disk is full: %v", ev.ID, err)
				case a.code == 503:
					refusedRun++
					refused = append(refused, ev)
					if a.status != "store_unavailable" || a.retryAfter == "" {
						t.Errorf("%s: 503 %q with Retry-After %q, want store_unavailable with a Retry-After", ev.ID, a.status, a.retryAfter)
					}
				case a.ok():
					refusedRun = 0
				default:
					t.Errorf("%s while the disk is full: %d %s, want 2xx or 503", ev.ID, a.code, a.status)
				}
				if err == nil {
					answers[ev.ID] = a
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("disk full: %d events sent, %d answered 503", len(answers), len(refused))
	if len(refused) == 0 {
		t.Fatalf("the full disk never refused a write (%d events accepted)", len(answers))
	}
	select {
	case <-s.gw.Done():
		t.Fatalf("the gateway died on a full disk: %v", s.gw.Err())
	default:
	}

	// While still full: what was answered 2xx is stored, what was
	// answered 503 is not.
	db, err := openDB(s.cfg.dbPath())
	if err != nil {
		t.Fatalf("open the database: %v", err)
	}
	stored, err := storedEvents(db)
	db.Close()
	if err != nil {
		t.Fatalf("read the database: %v", err)
	}
	for id, a := range answers {
		if _, ok := stored[id]; ok != a.ok() {
			t.Errorf("half-written: %s was answered %d %s, and is stored: %v", id, a.code, a.status, ok)
		}
	}
	// The downstream meanwhile: deliveries cannot be recorded.
	s.ds.setLatency(0)
	n0 := s.ds.count()
	time.Sleep(time.Second) // a window to measure the deliveries while full
	perPair := map[[2]string]int{}
	for _, r := range s.ds.snapshot()[n0:] {
		perPair[[2]string{r.Route, r.EventID}]++
	}
	most := 0
	for _, n := range perPair {
		most = max(most, n)
	}
	t.Logf("while the disk is full, the downstream received %d requests in 1s for %d (route, event) pairs, up to %d for one",
		s.ds.count()-n0, len(perPair), most)
	// A round whose outcome cannot be recorded runs again, but not in a
	// tight loop against a downstream that already answered 2xx.
	t.Run("no_redelivery_storm", func(t *testing.T) {
		if most > 10 {
			t.Errorf("while SQLite refuses writes, one (route, event) was sent %d times in 1s (%d requests for %d pairs): "+
				"a round whose outcome cannot be recorded must back off", most, s.ds.count()-n0, len(perPair))
		}
	})

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	t.Logf("tmpfs space freed")
	s.provider.add(refused...)
	s.provider.add(after...)
	if err := s.provider.waitIdle(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	s.provider.mu.Lock()
	for _, ev := range refused {
		if got := s.provider.first[ev.ID]; got != "accepted" {
			t.Errorf("half-written: %s was answered 503, and after recovery %q, want accepted", ev.ID, got)
		}
	}
	s.provider.mu.Unlock()
	s.verify(verifyOpts{streamOnce: true})
	if s.runs != 1 {
		t.Errorf("the gateway was started %d times; recovery must not need a restart", s.runs)
	}
}

// fill writes to path until the file system is full.
func fill(path string) error {
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
