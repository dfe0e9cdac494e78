package faults

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// clusterToken is the operators' token of the cluster scenario's gateways.
const clusterToken = "faults-cluster-operator-token"

// apiDelivery is what the view check reads of a delivery.
type apiDelivery struct {
	ID       string `json:"id"`
	Route    string `json:"route"`
	Source   string `json:"source"`
	EventID  string `json:"event_id"`
	State    string `json:"state"`
	Attempts int    `json:"attempts"`
}

// api asks gateway i's /v1 API and decodes the answer into out; the
// status is returned.
func (cs *clusterScenario) api(i int, method, path string, out any) (int, error) {
	req, err := http.NewRequest(method, "http://"+cs.cfgs[i].Listen+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+clusterToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return resp.StatusCode, err
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: %d %.200s: %w", method, path, resp.StatusCode, body, err)
		}
	}
	return resp.StatusCode, nil
}

// deliveries lists every delivery gateway i shows, page by page.
func (cs *clusterScenario) deliveries(i int) (map[string]apiDelivery, error) {
	out := map[string]apiDelivery{}
	cursor := ""
	for range 100 {
		var page struct {
			Data []apiDelivery `json:"data"`
			Next string        `json:"next_cursor"`
		}
		path := "/v1/deliveries?limit=500"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		code, err := cs.api(i, http.MethodGet, path, &page)
		if err != nil {
			return nil, err
		}
		if code != http.StatusOK {
			return nil, fmt.Errorf("GET %s: %d", path, code)
		}
		for _, d := range page.Data {
			out[d.ID] = d
		}
		if page.Next == "" {
			return out, nil
		}
		cursor = page.Next
	}
	return nil, fmt.Errorf("more than 100 pages")
}

// checkOneView checks, once every event is delivered, that every gateway
// shows the same deliveries, each succeeded, one per (route, event) the
// downstream answered 2xx, whichever gateway accepted or delivered it. Then
// it asks each gateway to retry deliveries listed by another (IDs travel
// between gateways): each answer names the delivery asked for (else a
// wrong-target retry) and, as each succeeded, nothing is sent.
func (cs *clusterScenario) checkOneView() {
	s, t := cs.s, cs.s.t
	t.Helper()
	want := map[string]bool{} // route + "/" + event ID, answered 2xx
	cs.front.mu.Lock()
	for _, o := range cs.front.oks {
		want[o.route+"/"+o.id] = true
	}
	cs.front.mu.Unlock()
	views := make([]map[string]apiDelivery, len(cs.gws))
	gatewaytest.WaitFor(t, "every gateway to show every delivery, succeeded", 60*time.Second, func() (bool, string) {
		var short []string
		for i := range cs.gws {
			v, err := cs.deliveries(i)
			if err != nil {
				return false, fmt.Sprintf("gateway %d: %v", i, err)
			}
			views[i] = v
			got, seen := map[string]bool{}, map[string]string{}
			for _, d := range v {
				if d.Source == "stripe" {
					seen[d.Route+"/"+d.EventID] = fmt.Sprintf("%s, %d attempts", d.State, d.Attempts)
					got[d.Route+"/"+d.EventID] = d.State == "succeeded"
				}
			}
			n := 0
			for k := range want {
				if got[k] {
					n++
				}
			}
			for k := range want {
				if !got[k] {
					short = append(short, fmt.Sprintf("gateway %d shows %d of %d succeeded deliveries (e.g. not %s: %q)",
						i, n, len(want), k, seen[k]))
					break
				}
			}
		}
		return len(short) == 0, strings.Join(short, "; ")
	})
	for i := 1; i < len(views); i++ {
		if a, b := slices.Sorted(maps.Keys(views[0])), slices.Sorted(maps.Keys(views[i])); !slices.Equal(a, b) {
			t.Errorf("gateways 0 and %d list different delivery IDs: %d and %d", i, len(a), len(b))
		}
	}

	// Retries asked of another gateway than the one whose list named them.
	before := s.ds.count()
	ids := slices.Sorted(maps.Keys(views[0]))
	rng := newRNG(s.seed, 12)
	wrong, asked := 0, 0
	for n := range min(60, len(ids)) {
		id := ids[rng.intn(len(ids))]
		from := n % len(cs.gws)
		to := (from + 1 + rng.intn(len(cs.gws)-1)) % len(cs.gws)
		d := views[from][id]
		if d.ID == "" {
			continue // gateway `from` lists it only if views agree
		}
		// The gateway asked resolves the ID as its retry does.
		var got apiDelivery
		code, err := cs.api(to, http.MethodGet, "/v1/deliveries/"+url.PathEscape(id), &got)
		if err != nil {
			t.Errorf("get %s at gateway %d: %v", id, to, err)
			continue
		}
		rcode, err := cs.api(to, http.MethodPost, "/v1/deliveries/"+url.PathEscape(id)+"/retry", nil)
		if err != nil {
			t.Errorf("retry %s at gateway %d: %v", id, to, err)
			continue
		}
		asked++
		if code != http.StatusOK || rcode != http.StatusConflict || got.ID != id || got.Route != d.Route || got.EventID != d.EventID {
			wrong++
			if wrong <= 5 {
				t.Errorf("wrong-target retry: %s (route %s, event %s, listed by gateway %d) at gateway %d: get %d names %q (route %s, event %s); retry %d, want 409 already_succeeded",
					id, d.Route, d.EventID, from, to, code, got.ID, got.Route, got.EventID, rcode)
			}
		}
	}
	// Give a wrongly started round time to reach the downstream.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && s.ds.count() == before {
		time.Sleep(100 * time.Millisecond)
	}
	if sent := s.ds.count() - before; sent != 0 {
		t.Errorf("retries of succeeded deliveries sent %d requests, want 0", sent)
	}
	t.Logf("one view: %d deliveries on each of %d gateways; %d retries across gateways, wrong-target %d",
		len(views[0]), len(cs.gws), asked, wrong)
}
