package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/outbound"
)

// The delivering floor delivers each event it accepted exactly once, with
// the stored body and the headers, and records each outcome in its store:
// with room in the queue, and with a queue of one (the events past it are
// read back from the store); a failed POST is recorded as failed. The
// brokered floor likewise, through its JetStream server.
func TestDeliveringFloor(t *testing.T) {
	for _, tc := range []struct {
		name         string
		queue, n     int
		down         bool // the downstream refuses connections
		brokered     bool
		wantReadBack bool
	}{
		{name: "queue with room", queue: floorQueue, n: 8},
		{name: "queue of one, read back", queue: 1, n: 2, wantReadBack: true},
		{name: "downstream down", queue: floorQueue, n: 4, down: true},
		{name: "brokered", queue: floorQueue, n: 8, brokered: true},
		{name: "brokered, queue of one, read back", queue: 1, n: 2, brokered: true, wantReadBack: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testDeliveringFloor(t, tc.queue, tc.n, tc.down, tc.brokered, tc.wantReadBack)
		})
	}
}

func testDeliveringFloor(t *testing.T, queue, n int, down, brokered, wantReadBack bool) {
	const events, size = 300, 512
	gate := make(chan struct{}) // the downstream answers once every event is in
	var gateOnce sync.Once
	open := func() { gateOnce.Do(func() { close(gate) }) }
	defer open()
	var mu sync.Mutex
	seen := map[string]int{}
	var bad []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-gate
		body, err := io.ReadAll(r.Body)
		id := r.Header.Get("X-Hookgate-Event-Id")
		mu.Lock()
		defer mu.Unlock()
		seen[id]++
		switch {
		case err != nil:
			bad = append(bad, fmt.Sprintf("%s: body: %v", id, err))
		case string(body) != string(appendEvent(nil, id, size)):
			bad = append(bad, id+": not the stored body")
		case r.Header.Get("Idempotency-Key") != outbound.IdempotencyKey("bench", "stripe", id):
			bad = append(bad, id+": Idempotency-Key "+r.Header.Get("Idempotency-Key"))
		case r.Header.Get("Content-Type") != "application/json":
			bad = append(bad, id+": Content-Type "+r.Header.Get("Content-Type"))
		}
	}))
	defer srv.Close()
	defer open() // before srv.Close: its handlers wait for the gate
	url := srv.URL + "/hook"
	if down {
		url = "http://" + hangUpAddr(t) + "/hook"
	}
	dir := t.TempDir()
	s, err := openDeliveringFloor(dir, url, n, queue, brokered)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = s.close()
		}
	}()
	f := newFloorApp(s, benchSecret)

	// Every event twice, from 16 senders: one accepted copy each.
	var wg sync.WaitGroup
	var amu sync.Mutex
	accepted := map[string]int{}
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &worker{mac: hmac.New(sha256.New, []byte(benchSecret))}
			for i := g; i < 2*events; i += 16 {
				id := fmt.Sprintf("evt_d%d", i%events)
				body := appendEvent(nil, id, size)
				req := httptest.NewRequest("POST", "/webhooks/stripe", strings.NewReader(string(body)))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Stripe-Signature", string(w.sign(nil, time.Now().Unix(), body)))
				resp, err := f.Test(req, -1)
				if err != nil {
					t.Error(err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("%s: %d %s", id, resp.StatusCode, b)
					return
				}
				if strings.Contains(string(b), `"accepted"`) {
					amu.Lock()
					accepted[id]++
					amu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if len(accepted) != events {
		t.Fatalf("%d events accepted, want %d", len(accepted), events)
	}
	for id, k := range accepted {
		if k != 1 {
			t.Fatalf("%s accepted %d times", id, k)
		}
	}
	open()

	// Every outcome recorded (polled on a reader of the store).
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(dir, "floor.db")+"?_query_only=1&_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	wantStatus := 200
	if down {
		wantStatus = 0
	}
	gatewaytest.WaitFor(t, "every outcome recorded", 60*time.Second, func() (bool, string) {
		var k int
		err := db.QueryRow(`SELECT count(*) FROM events WHERE delivered_at IS NOT NULL AND status = ?`, wantStatus).Scan(&k)
		return err == nil && k == events, fmt.Sprintf("%d of %d with status %d, %v", k, events, wantStatus, err)
	})
	closed = true
	if err := s.close(); err != nil { // the workers have stopped: their counts are final
		t.Fatal(err)
	}
	readBack := s.deliver.readBackRows.Load()
	delivered, failed := s.deliver.delivered.Load(), s.deliver.failed.Load()
	var rows, undelivered int
	if err := db.QueryRow(`SELECT count(*), count(*) - count(delivered_at) FROM events`).Scan(&rows, &undelivered); err != nil || rows != events || undelivered != 0 {
		t.Fatalf("%d rows, %d undelivered, %v; want %d, 0", rows, undelivered, err, events)
	}
	if down {
		if failed != events || delivered != 0 {
			t.Fatalf("%d failed, %d delivered; want %d, 0", failed, delivered, events)
		}
		return
	}
	if delivered != events || failed != 0 {
		t.Fatalf("%d delivered, %d failed; want %d, 0", delivered, failed, events)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("%d bad requests, first: %s", len(bad), bad[0])
	}
	if len(seen) != events {
		t.Fatalf("downstream saw %d events, want %d", len(seen), events)
	}
	for id, k := range seen {
		if k != 1 || accepted[id] != 1 {
			t.Fatalf("%s delivered %d times (accepted %d)", id, k, accepted[id])
		}
	}
	if wantReadBack && readBack == 0 {
		t.Fatal("nothing read back from the store, with a queue of one")
	}
}

// hangUpAddr is a loopback address that closes each connection at once.
func hangUpAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	return ln.Addr().String()
}

func TestCPUPerDelivered(t *testing.T) {
	// 1.5 cores for 10 s and 0.5 cores for 2 s over 40,000 events: 400 µs each.
	if got := cpuPerDelivered(cpuSplit{server: 1.5}, 10*time.Second, cpuSplit{server: 0.5}, 2*time.Second, 40000); got != 400 {
		t.Errorf("got %v µs, want 400", got)
	}
	if got := cpuPerDelivered(cpuSplit{server: 1.5}, 10*time.Second, cpuSplit{}, 0, 0); got != 0 {
		t.Errorf("nothing delivered: got %v, want 0", got)
	}
}
