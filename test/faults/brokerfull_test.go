package faults

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Scenario 10: the embedded JetStream store on an 8 MiB tmpfs (SQLite is
// not), filled to the last byte under load, then freed. The stream's
// store fails a write and refuses every write after it until it is
// loaded again; intake keeps answering 2xx (SQLite is the record), /readyz's
// store check holds and /readyz/delivery is 503. Without a restart, the relay
// creates the stream again, and every acknowledged event is delivered
// under its one key.
func TestJetStreamDiskFull(t *testing.T) {
	t.Parallel()
	mnt := filepath.Join(t.TempDir(), "js")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=8m"); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (needs root or CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() {
		if syscall.Unmount(mnt, 0) != nil {
			syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	})
	s := newScenario(t, func(c *gwConfig) { c.NATSStoreDir = mnt })
	base := "http://" + s.cfg.Listen
	before, during, after := s.newEvents("j0", 60, 0), s.newEvents("j1", 60, 4<<10), s.newEvents("j2", 60, 0)
	s.start()
	s.provider.start(6, 10*time.Millisecond)
	s.forger.run(append(append(append([]*event{}, before...), during...), after...))
	s.provider.add(before...)
	if err := s.provider.waitIdle(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(mnt, "filler")
	if err := fill(filler); err != nil {
		t.Fatalf("fill the tmpfs: %v", err)
	}
	s.provider.add(during...)
	if err := s.provider.waitIdle(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "/readyz/delivery 503 while the JetStream disk is full", 30*time.Second, func() (bool, string) {
		code, body := apiGet(base+"/readyz/delivery", "")
		return code == 503, body
	})
	// SQLite takes events: /readyz's store check holds. (Its outbox check
	// fails only once an event waited nats.outbox_max_age, 60s.)
	if code, body := apiGet(base+"/readyz", ""); code != 200 && !checkOK(body, "store") {
		t.Errorf("/readyz while the JetStream disk is full = %d %s, want the store check ok", code, body)
	}
	time.Sleep(s.rng.between(0, 3*time.Second)) // the rest of the spell
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	t.Logf("tmpfs space freed")
	s.provider.add(after...)
	s.verify(verifyOpts{keepRunning: true})
	waitUntil(t, "/readyz/delivery 200 after the space was freed", 30*time.Second, func() (bool, string) {
		code, body := apiGet(base+"/readyz/delivery", "")
		return code == 200, body
	})
	if !s.logContains(1, "the events stream is broken") {
		t.Errorf("the full disk never broke the stream: the scenario tested nothing")
	}
	if s.runs != 1 {
		t.Errorf("the gateway was started %d times; recovery must not need a restart", s.runs)
	}
	s.stopClean()
	s.checkDB()
}

// checkOK reports whether a /readyz answer's check name is ok.
func checkOK(body, name string) bool {
	var r struct {
		Checks []struct {
			Name string `json:"name"`
			OK   bool   `json:"ok"`
		} `json:"checks"`
	}
	if json.Unmarshal([]byte(body), &r) != nil {
		return false
	}
	for _, c := range r.Checks {
		if c.Name == name {
			return c.OK
		}
	}
	return false
}
