package outbound_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/store"
)

// A route an operator paused is sent nothing, retries and replays
// included: they are 409 route_paused with nothing reset; once resumed
// they go out.
func TestPausedRouteRefusesRetryAndReplay(t *testing.T) {
	ds := newDownstream(t, func(w http.ResponseWriter, r *http.Request, n int) int {
		if strings.Contains(r.Header.Get("X-Hookgate-Event-Id"), "dead") {
			w.WriteHeader(410)
			return 410
		}
		w.WriteHeader(200)
		return 200
	})
	g := startGateway(t, baseConfig(t, routeYAML("r", ds.URL, ", retries: 0")))
	g.send(t, "evt_ok", "a")
	g.send(t, "evt_dead", "a")
	g.waitState(t, "r", "stripe", "evt_ok", store.StateSucceeded)
	dead := g.waitState(t, "r", "stripe", "evt_dead", store.StateDead)
	if code, body := g.api(t, http.MethodPost, "/v1/routes/r/pause", apiToken); code != 200 {
		t.Fatalf("pause: %d %s", code, body)
	}
	before := len(ds.requests())
	for _, path := range []string{"/v1/events/stripe/evt_ok/replay", "/v1/deliveries/" + dead.UID + "/retry"} {
		if code, body := g.api(t, http.MethodPost, path, apiToken); code != 409 || !strings.Contains(body, "route_paused") {
			t.Errorf("POST %s on a paused route: %d %s, want 409 route_paused", path, code, body)
		}
	}
	if d := g.delivery(t, "r", "stripe", "evt_dead"); d.State != store.StateDead {
		t.Errorf("the refused retry left the delivery %s, want dead", d.State)
	}
	if code, body := g.api(t, http.MethodPost, "/v1/routes/r/resume", apiToken); code != 200 {
		t.Fatalf("resume: %d %s", code, body)
	}
	if code, body := g.api(t, http.MethodPost, "/v1/events/stripe/evt_ok/replay", apiToken); code != 202 {
		t.Fatalf("replay once resumed: %d %s", code, body)
	}
	waitFor(t, "the replay sent", func() (bool, string) {
		n := len(ds.requests())
		return n == before+1, fmt.Sprintf("%d requests since the pause", n-before)
	})
}

// A pause and a resume asked at once leave the route and the store's copy
// of its pause agreeing (a restart would otherwise flip the route).
func TestPauseAndResumeAtOnceAgree(t *testing.T) {
	g := startGateway(t, baseConfig(t, routeYAML("r", newDownstream(t, nil).URL, "")))
	for i := range 100 {
		var wg sync.WaitGroup
		for _, op := range []string{"pause", "resume"} {
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodPost, "http://"+g.Addr()+"/v1/routes/r/"+op, nil)
				req.Header.Set("Authorization", "Bearer "+apiToken)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
		v, err := g.Store().Meta(context.Background(), "route_paused:r")
		if err != nil {
			t.Fatal(err)
		}
		if st := g.route(t, "r").State; (v == "1") != (st == "paused") {
			t.Fatalf("round %d: the route is %q, its stored pause %q", i, st, v)
		}
	}
}

// A retry accepted while a round of its delivery runs, then the route
// paused before it gets its turn, sends nothing, and the delivery keeps
// the state the round left.
func TestRetryQueuedThenPausedSendsNothing(t *testing.T) {
	release := make(chan struct{})
	ds := newDownstream(t, func(w http.ResponseWriter, r *http.Request, n int) int {
		if n == 1 {
			<-release
		}
		w.WriteHeader(500)
		return 500
	})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	g := startGateway(t, baseConfig(t, routeYAML("r", ds.URL, ", retries: 0, schedule: [200ms]")))
	g.send(t, "evt_1", "a")
	waitFor(t, "the second round's request held", func() (bool, string) {
		n := len(ds.requests())
		return n == 2, fmt.Sprint(n)
	})
	d := g.delivery(t, "r", "stripe", "evt_1")
	if code, body := g.api(t, http.MethodPost, "/v1/deliveries/"+d.UID+"/retry", apiToken); code != 202 {
		t.Fatalf("retry: %d %s", code, body)
	}
	if code, body := g.api(t, http.MethodPost, "/v1/routes/r/pause", apiToken); code != 200 {
		t.Fatalf("pause: %d %s", code, body)
	}
	unblock()
	g.waitState(t, "r", "stripe", "evt_1", store.StateDead)
	// The retry's turn comes once the round it waited for is recorded;
	// poll a while for a request it should not send.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if n := len(ds.requests()); n != 2 {
			t.Fatalf("%d requests, want 2: the retry queued before the pause was sent", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d := g.delivery(t, "r", "stripe", "evt_1"); d.State != store.StateDead {
		t.Errorf("the delivery is %s after the skipped retry, want dead", d.State)
	}
}
