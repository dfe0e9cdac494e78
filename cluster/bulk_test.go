package cluster_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/app"
	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// A bulk retry sent to every gateway of a cluster retries every dead
// letter, each once: the rounds go through the shared delivery state, so
// one gateway's retry of a delivery another retried already sends nothing.
func TestBulkRetryAcrossGateways(t *testing.T) {
	urls := runNATSCluster(t, 3)
	var mu sync.Mutex
	gone := true
	ds := newKeyed(t, func(*http.Request, string, int) int {
		mu.Lock()
		defer mu.Unlock()
		if gone {
			return http.StatusGone
		}
		return http.StatusOK
	})
	gws := []*app.App{startGateway(t, "a", urls, ds.URL), startGateway(t, "b", urls, ds.URL)}
	p := newPublisher(t, urls)
	const n = 40
	for i := range n {
		p.publish(fmt.Sprintf("e%d", i), 0)
	}
	p.drained()
	for i := range n {
		if got := ds.of(fmt.Sprintf("e%d", i)); len(got) != 1 {
			t.Fatalf("e%d before the retry: %+v, want one request", i, got)
		}
	}
	mu.Lock()
	gone = false
	mu.Unlock()
	matched := 0
	for _, g := range gws {
		req, _ := http.NewRequest(http.MethodPost, "http://"+g.Addr()+"/v1/deliveries/retry", strings.NewReader(`{"route":"r"}`))
		req.Header.Set("Authorization", "Bearer "+apiToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var ans struct{ Count int }
		if resp.StatusCode != http.StatusAccepted || json.Unmarshal(body, &ans) != nil {
			t.Fatalf("bulk retry: %d %s", resp.StatusCode, body)
		}
		matched += ans.Count
	}
	// Each gateway's store holds the deliveries it recorded (or, where
	// stores keep the cluster's records, all of them).
	if matched < n {
		t.Fatalf("the gateways matched %d dead letters in all, want at least %d", matched, n)
	}
	gatewaytest.WaitFor(t, "every dead letter delivered", 60*time.Second, func() (bool, string) {
		for i := range n {
			if ok, _ := successes(ds.of(fmt.Sprintf("e%d", i))); ok != 1 {
				return false, fmt.Sprintf("e%d: %+v", i, ds.of(fmt.Sprintf("e%d", i)))
			}
		}
		return true, ""
	})
	for i := range n {
		if got := ds.of(fmt.Sprintf("e%d", i)); len(got) != 2 {
			t.Errorf("e%d: %+v, want the dead request and one retry", i, got)
		}
	}
}
