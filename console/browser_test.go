package console_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

var screenshots = flag.String("screenshots", "", "save a PNG of each console page in this directory (e.g. ../docs)")

// browser starts headless Chromium, or skips the test when there is none
// and CI is not set (with CI set, a missing browser fails the test). The
// page's errors (a CSP violation is one) are collected.
func browser(t *testing.T) (context.Context, *consoleLog) {
	t.Helper()
	var exe string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			exe = p
			break
		}
	}
	if exe == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("no chromium binary found and CI is set: install Debian's chromium (.ci/run does)")
		}
		t.Skip("no chromium binary found: install Debian's chromium to run the console's browser tests")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox, // root in a container has no sandbox
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 1200),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelA)
	ctx, cancelB := chromedp.NewContext(actx)
	t.Cleanup(cancelB)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	cl := &consoleLog{done: make(chan struct{})}
	msgs := chromedp.Console(ctx)
	go func() {
		defer close(cl.done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
				cl.add(string(m.Type) + ": " + m.Text)
			}
		}
	}()
	t.Cleanup(func() { cancelB(); <-cl.done })
	return ctx, cl
}

// consoleLog collects the page's errors.
type consoleLog struct {
	mu   sync.Mutex
	msgs []string
	done chan struct{}
}

func (c *consoleLog) add(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, s)
}

func (c *consoleLog) errors() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, m := range c.msgs {
		// The task token's refusal is logged by the browser as a failed load.
		if strings.Contains(m, "status of 403") || strings.Contains(m, "Error Code 403") {
			continue
		}
		out = append(out, m)
	}
	return out
}

func shot(t *testing.T, name string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if *screenshots == "" {
			return nil
		}
		png, err := chromedp.CaptureScreenshot()(ctx, tg)
		if err != nil {
			return err
		}
		p := filepath.Join(*screenshots, "console-"+name+".png")
		t.Logf("screenshot %s (%d bytes)", p, len(png))
		return os.WriteFile(p, png, 0o644)
	})
}

// The console in a real browser: log in, find an event by a JSON field,
// open it, retry selected dead letters, pause and resume a route, the
// tasks page; a task client's token is refused; the CSP blocks nothing the
// console needs.
func TestBrowser(t *testing.T) {
	ctx, clog := browser(t)
	g := startGateway(t)
	stats := g.ConsoleStats()
	start := time.Now().Add(-5 * time.Minute)
	for i := 1; i <= 4; i++ {
		g.post(t, orderBody(i), "User-Agent", "shop-backend/2.1")
		stats.Sample(start.Add(time.Duration(i) * time.Minute))
	}
	g.waitDead(t, 4)
	stats.Sample(time.Now())

	base := g.base + "/console/"
	var text string
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		actx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := chromedp.Do(actx, actions...); err != nil {
			html, _ := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("body")))
			t.Fatalf("%s: %v\npage: %s\nbrowser errors: %q", what, err, html, clog.errors())
		}
	}
	// hxClick clicks an element htmx drives once htmx has wired it (it
	// wires a swapped-in element after its settle delay).
	hxClick := func(sel string) chromedp.Action[chromedp.Void] {
		wired := fmt.Sprintf(`(function () { var e = document.querySelector(%q); `+
			`return !!(e && e["htmx-internal-data"] && e["htmx-internal-data"].initHash); })()`, sel)
		return chromedp.Steps(
			chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				_, err := chromedp.Poll[bool](wired)(ctx, tg)
				return err
			}),
			chromedp.Click(chromedp.CSS(sel)),
		)
	}
	// into runs a into *dst, as a step.
	into := func(dst *string, a chromedp.Action[string]) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) (err error) {
			*dst, err = a(ctx, tg)
			return err
		})
	}

	// A task client's token is refused.
	run("log in with a task token",
		chromedp.Navigate(base),
		chromedp.WaitVisible(chromedp.ID("#token")),
		chromedp.SendKeys(chromedp.ID("#token"), taskToken),
		chromedp.Click(chromedp.ID("#login-button")),
		chromedp.WaitVisible(chromedp.ID("#error")),
		into(&text, chromedp.Text(chromedp.ID("#error"))),
	)
	if !strings.Contains(text, "not an operator") {
		t.Fatalf("task token: error %q", text)
	}

	run("log in",
		chromedp.WaitVisible(chromedp.ID("#token")),
		chromedp.SendKeys(chromedp.ID("#token"), opToken),
		chromedp.Click(chromedp.ID("#login-button")),
		chromedp.WaitVisible(chromedp.CSS(`#routes-table tr[data-route="broken"]`)),
		chromedp.WaitVisible(chromedp.CSS(".chart.drawn .uplot")),
		into(&text, chromedp.Text(chromedp.ID("#main"))),
		shot(t, "overview"),
	)
	for _, want := range []string{"shop accepted", "broken dead", "ok succeeded"} {
		if !strings.Contains(text, want) {
			t.Errorf("overview lacks %q:\n%s", want, text)
		}
	}

	run("find an event by a JSON field",
		chromedp.Click(chromedp.ID("#nav-events")),
		chromedp.WaitVisible(chromedp.ID("#q-field")),
		chromedp.SendKeys(chromedp.ID("#q-field"), "data.customer"),
		chromedp.SendKeys(chromedp.ID("#q-value"), "c_42"),
		chromedp.Click(chromedp.ID("#q-search")),
		chromedp.WaitVisible(chromedp.CSS("#events-table a.event-link")),
		into(&text, chromedp.Text(chromedp.ID("#events-table"))),
		shot(t, "events"),
	)
	if !strings.Contains(text, "ord_2") || strings.Contains(text, "ord_1") {
		t.Fatalf("search data.customer = c_42 found:\n%s", text)
	}

	var body, timeline string
	run("open it",
		hxClick("#events-table a.event-link"),
		chromedp.WaitVisible(chromedp.ID("#event-page")),
		chromedp.WaitVisible(chromedp.CSS(`.delivery[data-route="broken"] .timeline li`)),
		into(&text, chromedp.Text(chromedp.ID("#event-id"))),
		into(&body, chromedp.Text(chromedp.ID("#body"))),
		into(&timeline, chromedp.Text(chromedp.CSS(`.delivery[data-route="broken"] .timeline`))),
		shot(t, "event"),
	)
	if text != "ord_2" || !strings.Contains(body, `"customer": "c_42"`) {
		t.Errorf("event page: id %q, body %q", text, body)
	}
	if !strings.Contains(timeline, "HTTP 500") || !strings.Contains(timeline, "<b>down</b>") {
		t.Errorf("timeline lacks the attempts' status and response: %q", timeline)
	}

	run("replay it to ok",
		hxClick(`.delivery[data-route="ok"] .replay-route`),
	)
	gatewaytest.WaitFor(t, "ord_2 replayed to ok", 30*time.Second, func() (bool, string) {
		n := g.okDelivered(orderBody(2))
		return n == 2, fmt.Sprint(n)
	})

	run("dead letters of broken",
		hxClick("#nav-overview"),
		chromedp.WaitVisible(chromedp.CSS(`#routes-table tr[data-route="broken"] .dead-link`)),
		hxClick(`#routes-table tr[data-route="broken"] .dead-link`),
		chromedp.WaitVisible(chromedp.CSS("#dead-table .dead-select")),
		chromedp.Click(chromedp.ID("#select-all")),
		shot(t, "dead-letters"),
	)
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll(".dead-select:checked").length`))
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Fatalf("select-all checked %d, want 4", n)
	}
	g.failing.Store(false)
	run("retry selected",
		chromedp.Click(chromedp.ID("#retry-selected")),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Poll[bool](`document.getElementById("retry-result") !== null && document.getElementById("retry-result").textContent.startsWith("4 retried")`)(ctx, tg)
			return err
		}),
	)
	gatewaytest.WaitFor(t, "the 4 dead letters delivered", 30*time.Second, func() (bool, string) {
		var got []int
		for i := 1; i <= 4; i++ {
			got = append(got, g.delivered(orderBody(i)))
		}
		return fmt.Sprint(got) == "[1 1 1 1]", fmt.Sprint(got)
	})

	// Every dead letter of the route, by filter (POST /v1/deliveries/retry).
	g.failing.Store(true)
	for i := 5; i <= 6; i++ {
		g.post(t, orderBody(i))
	}
	g.waitDead(t, 2)
	g.failing.Store(false)
	run("retry every dead letter of broken",
		hxClick("#nav-overview"),
		hxClick(`#routes-table tr[data-route="broken"] .dead-link`),
		chromedp.WaitVisible(chromedp.CSS("#dead-table .dead-select")),
		chromedp.Click(chromedp.ID("#retry-all")),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Poll[bool](`document.getElementById("retry-result") !== null && `+
				`document.getElementById("retry-result").textContent.startsWith("2 dead letters of broken queued")`)(ctx, tg)
			return err
		}),
	)
	gatewaytest.WaitFor(t, "the 2 new dead letters delivered, the 4 earlier ones not again", 30*time.Second, func() (bool, string) {
		var got []int
		for i := 1; i <= 6; i++ {
			got = append(got, g.delivered(orderBody(i)))
		}
		return fmt.Sprint(got) == "[1 1 1 1 1 1]", fmt.Sprint(got)
	})

	run("pause ok",
		hxClick("#nav-overview"),
		chromedp.WaitVisible(chromedp.CSS(`#routes-table tr[data-route="ok"] button.pause`)),
		hxClick(`#routes-table tr[data-route="ok"] button.pause`),
		chromedp.WaitVisible(chromedp.CSS(`#routes-table tr[data-route="ok"] button.resume`)),
		into(&text, chromedp.Text(chromedp.CSS(`#routes-table tr[data-route="ok"] .state`))),
	)
	if text != "paused" {
		t.Errorf("ok shows %q after pause", text)
	}
	if _, routes := g.get(t, opToken, "/v1/routes"); !strings.Contains(routes, `"name":"ok","state":"paused"`) {
		t.Errorf("the API does not show ok paused: %s", routes)
	}
	run("resume ok",
		hxClick(`#routes-table tr[data-route="ok"] button.resume`),
		chromedp.WaitVisible(chromedp.CSS(`#routes-table tr[data-route="ok"] button.pause`)),
	)
	if _, routes := g.get(t, opToken, "/v1/routes"); !strings.Contains(routes, `"name":"ok","state":"active"`) {
		t.Errorf("the API does not show ok active: %s", routes)
	}

	run("tasks",
		hxClick("#nav-tasks"),
		chromedp.WaitVisible(chromedp.ID("#tasks-table")),
		shot(t, "tasks"),
	)

	run("log out",
		chromedp.Click(chromedp.ID("#logout")),
		chromedp.WaitVisible(chromedp.ID("#token")),
	)
	kept, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`sessionStorage.getItem("hookgate-token") !== null`))
	if err != nil {
		t.Fatal(err)
	}
	if kept {
		t.Errorf("sessionStorage holds the token after log out")
	}
	if errs := clog.errors(); len(errs) > 0 {
		t.Errorf("the browser reported errors (a CSP violation is one): %q", errs)
	}
}

// orderBody is the body of test order i.
func orderBody(i int) string {
	return fmt.Sprintf(`{"id":"ord_%d","type":"order.paid","data":{"customer":"c_%d","total":%d}}`, i, 40+i, 100*i)
}
