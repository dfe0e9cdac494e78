package faults

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

const poisonToken = "faults-poison-token-0123456789"

// Scenario 8: poison events. An external nats-server comes back from a
// restart with a max payload of 64 KiB while the gateway runs (it took
// 1 MiB at the gateway's start); events of 100 KiB arrive among normal
// ones. Intake answers 2xx throughout; the big events are parked and
// listed at /v1/outbox/parked, the ones behind them are delivered, and
// /readyz/delivery stays 200. Once the server takes 1 MiB again, the operator puts
// the parked events back and everything is delivered once.
func TestPoisonEvents(t *testing.T) {
	t.Parallel()
	ns := &natsServer{t: t, port: freePort(t), dir: filepath.Join(t.TempDir(), "nats")}
	ns.start()
	t.Cleanup(ns.shutdown)
	s := newScenario(t, func(c *gwConfig) {
		c.NATSURL = ns.url()
		c.Extra = fmt.Sprintf("api: {tokens: [%q]}\n", poisonToken)
	})
	base := "http://" + s.cfg.Listen
	first := s.newEvents("p0", 40, 0)
	poison := s.newEvents("px", 5, 100<<10)
	after := s.newEvents("p1", 80, 0)
	s.start()
	s.provider.start(6, 10*time.Millisecond)
	s.forger.run(append(append(append([]*event{}, first...), poison...), after...))
	s.provider.add(first...)
	if err := s.provider.waitIdle(60 * time.Second); err != nil {
		t.Fatal(err)
	}

	ns.shutdown()
	ns.maxPayload = 64 << 10
	ns.start()
	for i, ev := range after {
		if i%16 == 0 && i/16 < len(poison) {
			s.provider.add(poison[i/16])
		}
		s.provider.add(ev)
	}
	if err := s.provider.waitIdle(60 * time.Second); err != nil {
		t.Fatal(err)
	}

	// The normal events arrive while the big ones are parked.
	want := map[string]bool{}
	for _, ev := range after {
		want[ev.ID] = true
	}
	waitUntil(t, "every normal event delivered to route all", 60*time.Second, func() (bool, string) {
		got := map[string]bool{}
		for _, r := range s.ds.snapshot() {
			if r.Route == "all" && r.ok() && want[r.EventID] {
				got[r.EventID] = true
			}
		}
		return len(got) == len(want), fmt.Sprintf("%d of %d", len(got), len(want))
	})
	var seqs []int64
	waitUntil(t, "the big events parked", 30*time.Second, func() (bool, string) {
		code, body := apiGet(base+"/v1/outbox/parked", poisonToken)
		var p struct {
			Data []struct {
				Seq    int64  `json:"seq"`
				ID     string `json:"event_id"`
				Reason string `json:"reason"`
			} `json:"data"`
		}
		if code != 200 || json.Unmarshal([]byte(body), &p) != nil {
			return false, fmt.Sprintf("%d %s", code, body)
		}
		var ids []string
		seqs = seqs[:0]
		for _, e := range p.Data {
			ids = append(ids, e.ID)
			seqs = append(seqs, e.Seq)
			if !strings.Contains(e.Reason, "maximum payload") {
				return false, "reason " + e.Reason
			}
		}
		sort.Strings(ids)
		var wantIDs []string
		for _, ev := range poison {
			wantIDs = append(wantIDs, ev.ID)
		}
		return strings.Join(ids, ",") == strings.Join(wantIDs, ","), strings.Join(ids, ",")
	})
	for _, r := range s.ds.snapshot() {
		for _, ev := range poison {
			if r.EventID == ev.ID {
				t.Errorf("parked event %s reached the downstream", ev.ID)
			}
		}
	}
	if code, body := apiGet(base+"/readyz/delivery", ""); code != 200 {
		t.Errorf("/readyz/delivery with parked events = %d %s, want 200", code, body)
	}
	if code, body := apiGet(base+"/metrics", ""); code != 200 || !strings.Contains(body, fmt.Sprintf("hookgate_outbox_parked_total %d", len(poison))) {
		t.Errorf("/metrics does not count %d parked events: %d", len(poison), code)
	}

	// The server takes 1 MiB again; the operator puts them back.
	ns.shutdown()
	ns.maxPayload = 0
	ns.start()
	waitUntil(t, "delivering", 30*time.Second, func() (bool, string) {
		code, body := apiGet(base+"/readyz/delivery", "")
		return code == 200, body
	})
	for _, seq := range seqs {
		req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/v1/outbox/parked/%d/requeue", base, seq), nil)
		req.Header.Set("Authorization", "Bearer "+poisonToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 202 {
			t.Fatalf("requeue %d = %d, want 202", seq, resp.StatusCode)
		}
	}
	s.verify(verifyOpts{streamOnce: true})
}

func apiGet(url, token string) (int, string) {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
