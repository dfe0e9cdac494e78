package console

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

	"github.com/hookgate/hookgate/admin"
	"github.com/hookgate/hookgate/httperror"
	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/store"
)

// serveConsole serves a console on st over real HTTP; every token is an
// operator's.
func serveConsole(t *testing.T, st *store.Store, cfg Config) (*Console, string) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Store = st
	cfg.Authorize = func(string) (admin.Caller, bool) { return admin.Caller{Operator: true}, true }
	c, err := New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	app := fiber.New(fiber.Config{ErrorHandler: httperror.Handler(log), DisableStartupMessage: true})
	c.Register(app)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = app.Listener(ln) }()
	t.Cleanup(func() { _ = app.Shutdown() })
	return c, "http://" + ln.Addr().String()
}

// searchAnswer GETs a console search and reads an error answer's code
// and message.
func searchAnswer(t *testing.T, base, query string) (status int, code, msg string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/console/f/events?"+query, nil)
	req.Header.Set("Authorization", "Bearer x")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct{ Error httperror.Error }
	body, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(body, &e)
	return resp.StatusCode, e.Error.Code, e.Error.Message
}

// A search of events by a body field is bounded: one that has not
// finished within console.SearchTimeout is stopped (its SQLite statement
// interrupted; store TestSearchEventsInterrupted) and answered 503
// search_timeout telling the operator to narrow it, as is one that waited
// that long for a turn (at most Searches at once, so that searches leave
// the store's other read connections to intake's checks and /readyz).
// Before, the request's context was context.Background(): the search ran
// to its end whatever the bound or the browser.
func TestSearchBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	st, err := store.Open(context.Background(), store.Config{Path: path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	gatewaytest.FillEvents(t, path, "shop", 10000, 30000, time.Now().Add(-time.Hour).UnixMilli())
	if st, err = store.Open(context.Background(), store.Config{Path: path}, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })

	// A whole search of the 10000 bodies takes over a second of CPU; the
	// bound is a tenth of that.
	c, base := serveConsole(t, st, Config{SearchTimeout: 100 * time.Millisecond, Searches: 1})
	field := "field=n&value=no+such+value"
	status, code, msg := searchAnswer(t, base, field)
	if status != 503 || code != "search_timeout" || !strings.Contains(msg, "narrow") {
		t.Errorf("a search past its bound: %d %s %q; want 503 search_timeout, asking to narrow it", status, code, msg)
	}
	// The one turn taken: a search waits for it, within the bound.
	c.searches <- struct{}{}
	if status, code, _ := searchAnswer(t, base, field); status != 503 || code != "search_timeout" {
		t.Errorf("a search without a turn: %d %s; want 503 search_timeout", status, code)
	}
	if status, _, _ := searchAnswer(t, base, "source=shop&id=e1"); status != 200 {
		t.Errorf("a search by ID without a turn: %d; want 200 (only a body field's search takes one)", status)
	}
	<-c.searches

	// Within the default bound (10s) the whole search ends: no match.
	_, base = serveConsole(t, st, Config{})
	if status, code, msg := searchAnswer(t, base, field); status != 200 {
		t.Errorf("the whole search within the default bound: %d %s %q; want 200", status, code, msg)
	}
}
