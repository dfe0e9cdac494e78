package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"io"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The floor claims each event once: accepted the first time (stored with
// its body), duplicate after, also when both copies land in one group
// commit; a bad signature is refused and nothing stored.
func TestFloorClaims(t *testing.T) {
	dir := t.TempDir()
	s, err := openFloor(dir)
	if err != nil {
		t.Fatal(err)
	}
	f := newFloorApp(s, benchSecret)
	w := &worker{mac: hmac.New(sha256.New, []byte(benchSecret))}
	post := func(id, sig string) (int, string) {
		body := appendEvent(nil, id, 1024)
		if sig == "" {
			sig = string(w.sign(nil, time.Now().Unix(), body))
		}
		req := httptest.NewRequest("POST", "/webhooks/stripe", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Stripe-Signature", sig)
		resp, err := f.Test(req, -1)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post("evt_1", ""); code != 200 || !strings.Contains(body, `"accepted"`) {
		t.Fatalf("first copy: %d %s", code, body)
	}
	if code, body := post("evt_1", ""); code != 200 || !strings.Contains(body, `"duplicate"`) {
		t.Fatalf("second copy: %d %s", code, body)
	}
	if code, _ := post("evt_2", "t=1,v1=00"); code != 401 {
		t.Fatalf("bad signature: %d, want 401", code)
	}
	// Many concurrent copies of a few IDs: one accepted per ID.
	var mu sync.Mutex
	accepted := map[string]int{}
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := []string{"evt_a", "evt_b", "evt_c", "evt_d"}[i%4]
			ww := &worker{mac: hmac.New(sha256.New, []byte(benchSecret))}
			body := appendEvent(nil, id, 512)
			req := httptest.NewRequest("POST", "/webhooks/stripe", strings.NewReader(string(body)))
			req.Header.Set("Stripe-Signature", string(ww.sign(nil, time.Now().Unix(), body)))
			resp, err := f.Test(req, -1)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			mu.Lock()
			defer mu.Unlock()
			if strings.Contains(string(b), `"accepted"`) {
				accepted[id]++
			}
		}()
	}
	wg.Wait()
	for _, id := range []string{"evt_a", "evt_b", "evt_c", "evt_d"} {
		if accepted[id] != 1 {
			t.Errorf("%s accepted %d times, want once", id, accepted[id])
		}
	}
	if err := s.close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(dir, "floor.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n, size int
	if err := db.QueryRow(`SELECT count(*), max(length(body)) FROM events`).Scan(&n, &size); err != nil || n != 5 || size != 1024 {
		t.Fatalf("stored %d events, longest %d bytes, %v; want 5, 1024", n, size, err)
	}
	var mode string
	if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode %q, %v; want wal", mode, err)
	}
}

func TestFloorRatios(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		intake, e2e, floor, bare float64
		dIntake, dE2E            float64 // the delivering floor's
		noRoute                  bool
		want                     []string
	}{
		{"with delivery", 12000, 10000, 20000, 80000, 0, 0, false, []string{
			"| intake / durable floor (with delivery running) | 0.60 | ≥ 0.60 | yes |\n",
			"| intake / bare Fiber | 0.15 | | |\n",
			"| end-to-end delivery / durable floor | 0.50 | ≥ 0.50 | yes |\n"}},
		{"intake alone below", 15000, 0, 20000, 80000, 0, 0, true, []string{
			"| intake / durable floor (intake alone) | 0.75 | ≥ 0.90 | **no** |\n",
			"| intake / bare Fiber | 0.19 | | |\n"}},
		{"no floor measured", 15000, 9000, 0, 80000, 0, 0, false, []string{
			"| intake / bare Fiber | 0.19 | | |\n"}},
		{"nothing measured", 0, 0, 0, 0, 0, 0, false, nil},
		{"delivery slow", 12000, 4000, 20000, 0, 0, 0, false, []string{
			"| intake / durable floor (with delivery running) | 0.60 | ≥ 0.60 | yes |\n",
			"| end-to-end delivery / durable floor | 0.20 | ≥ 0.50 | **no** |\n"}},
		{"delivering floor", 12000, 8000, 20000, 80000, 15000, 10000, false, []string{
			"| intake / durable floor (with delivery running) | 0.60 | ≥ 0.60 | yes |\n",
			"| intake / bare Fiber | 0.15 | | |\n",
			"| end-to-end delivery / durable floor | 0.40 | ≥ 0.50 | **no** |\n",
			"| intake / delivering floor (with delivery running) | 0.80 | | |\n",
			"| end to end / delivering floor | 0.80 | | |\n"}},
		{"delivering floor, no end to end", 12000, 0, 0, 0, 15000, 10000, false, []string{
			"| intake / delivering floor (with delivery running) | 0.80 | | |\n"}},
		{"delivering floor with -no-route", 15000, 0, 20000, 0, 15000, 10000, true, []string{
			"| intake / durable floor (intake alone) | 0.75 | ≥ 0.90 | **no** |\n"}},
	} {
		got := floorRatios(tc.intake, tc.e2e, tc.floor, tc.bare, tc.dIntake, tc.dE2E, tc.noRoute)
		if strings.Join(got, "") != strings.Join(tc.want, "") {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

func TestRatiosTo(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		intake, e2e, fIn, fE2E float64
		noRoute                bool
		want                   []string
	}{
		{"both", 9000, 6000, 10000, 8000, false, []string{
			"| intake / brokered floor (with delivery running) | 0.90 | | |\n",
			"| end to end / brokered floor | 0.75 | | |\n"}},
		{"floor not measured", 9000, 6000, 0, 0, false, nil},
		{"no end to end", 9000, 0, 10000, 8000, false, []string{
			"| intake / brokered floor (with delivery running) | 0.90 | | |\n"}},
		{"-no-route", 9000, 6000, 10000, 8000, true, nil},
	} {
		got := ratiosTo("brokered floor", tc.intake, tc.e2e, tc.fIn, tc.fE2E, tc.noRoute)
		if strings.Join(got, "") != strings.Join(tc.want, "") {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

// bySecond buckets requests by the second they were due in, apart from
// the failed ones, and leaves out those past the last second.
func TestBySecond(t *testing.T) {
	at := []uint32{0, 10, 999, 1000, 1500, 1700, 2500, 3000}
	lat := []uint32{1000, 3000, failedLat, 2000, 9000, 4000, failedLat, 100}
	got := bySecond(at, lat, 3)
	want := []secondStats{
		{n: 2, failed: 1, p50: time.Millisecond, p99: 3 * time.Millisecond, maxL: 3 * time.Millisecond, commits: -1, cpu: -1, written: -1, delivered: -1},
		{n: 3, failed: 0, p50: 4 * time.Millisecond, p99: 9 * time.Millisecond, maxL: 9 * time.Millisecond, commits: -1, cpu: -1, written: -1, delivered: -1},
		{n: 0, failed: 1, commits: -1, cpu: -1, written: -1, delivered: -1},
	}
	if len(got) != len(want) {
		t.Fatalf("%d seconds, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("second %d: %+v, want %+v", i+1, got[i], want[i])
		}
	}
}
