package admin

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/hookgate/hookgate/httperror"
	"github.com/hookgate/hookgate/store"
)

// GET /v1/events and /v1/deliveries read the store under listTimeout: a
// read past it (its query interrupted) is answered 503 list_timeout
// naming the filters that narrow the list, for an operator and a task
// client alike. Before, the handlers passed UserContext(),
// context.Background(): a list whose filter matched few rows walked the
// whole receipt-time index, however long that took.
func TestListBounded(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(context.Background(), store.Config{Path: filepath.Join(t.TempDir(), "s.db")}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	const op, client = "operator-token-0123456789", "client-token-0123456789"
	// serve serves a handler of its own, listTimeout bound.
	serve := func(bound time.Duration) string {
		h := New([]string{op}, []string{client}, st, batchOnly{}, log)
		h.listTimeout = bound
		app := fiber.New(fiber.Config{ErrorHandler: httperror.Handler(log), DisableStartupMessage: true})
		h.Register(app)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = app.Listener(ln) }()
		t.Cleanup(func() { _ = app.Shutdown() })
		return "http://" + ln.Addr().String()
	}
	get := func(base, token, path string) (int, httperror.Error) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e struct{ Error httperror.Error }
		body, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(body, &e)
		return resp.StatusCode, e.Error
	}
	cases := []struct{ token, path, narrow string }{
		{op, "/v1/events?type=nope", "type"},
		{op, "/v1/deliveries?route=nope", "route"},
		{client, "/v1/deliveries", "route"},
	}
	base := serve(listTimeout)
	for _, c := range cases {
		if code, e := get(base, c.token, c.path); code != 200 {
			t.Errorf("%s within the bound: %d %+v; want 200", c.path, code, e)
		}
	}
	base = serve(time.Nanosecond) // past before the query runs
	for _, c := range cases {
		if code, e := get(base, c.token, c.path); code != 503 || e.Code != "list_timeout" || !strings.Contains(e.Message, c.narrow) {
			t.Errorf("%s past the bound: %d %+v; want 503 list_timeout naming %s", c.path, code, e, c.narrow)
		}
	}
	// A bulk retry's count is bounded the same way.
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/deliveries/retry", strings.NewReader(`{"route":"nope","state":"dead"}`))
	req.Header.Set("Authorization", "Bearer "+op)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(body), "list_timeout") {
		t.Errorf("a bulk retry's count past the bound: %d %s; want 503 list_timeout", resp.StatusCode, body)
	}
}

// batchOnly is an engine that only retries batches (none here): enough
// for the bulk retry's route to be served.
type batchOnly struct{ Engine }

func (batchOnly) RetryBatch(context.Context, []string) (int, error) { return 0, nil }
