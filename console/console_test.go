package console_test

import (
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/console"
	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// Every console answer, shell, static file, fragment and error alike,
// carries the strict CSP and nosniff; the shell holds no data; the data
// needs an operator's token.
func TestSecurityHeaders(t *testing.T) {
	g := startGateway(t)
	g.post(t, `{"id":"evt_secret_1","type":"order.paid"}`)
	for _, c := range []struct {
		path, token string
		status      int
	}{
		{"/console/", "", 200},
		{"/console/static/console.js", "", 200},
		{"/console/static/htmx-2.0.11.min.js", "", 200},
		{"/console/static/nothere.js", "", 404},
		{"/console/static/..%2fconsole.go", "", 404},
		{"/console/f/overview", "", 401},
		{"/console/f/overview", "wrong-token-0123456789", 401},
		{"/console/f/overview", taskToken, 403},
		{"/console/f/events", taskToken, 403},
		{"/console/f/overview", opToken, 200},
		{"/console/f/events?source=shop", opToken, 200},
		{"/console/f/event?source=shop&id=evt_secret_1", opToken, 200},
		{"/console/f/event?source=shop&id=nope", opToken, 404},
		{"/console/f/dead?route=broken", opToken, 200},
		{"/console/f/tasks", opToken, 200},
		{"/console/f/stats.json", opToken, 200},
	} {
		resp, body := g.get(t, c.token, c.path)
		if resp.StatusCode != c.status {
			t.Errorf("%s: status %d, want %d: %s", c.path, resp.StatusCode, c.status, body)
		}
		csp := resp.Header.Get("Content-Security-Policy")
		if csp != console.CSP {
			t.Errorf("%s: CSP %q", c.path, csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: X-Content-Type-Options %q", c.path, resp.Header.Get("X-Content-Type-Options"))
		}
		if c.status != 200 && strings.Contains(body, "evt_secret_1") {
			t.Errorf("%s refused, yet shows the event: %s", c.path, body)
		}
	}
	for _, want := range []string{"default-src 'self'", "frame-ancestors 'none'", "script-src 'self';", "style-src 'self';"} {
		if !strings.Contains(console.CSP, want) {
			t.Errorf("CSP %q lacks %q", console.CSP, want)
		}
	}
	if strings.Contains(console.CSP, "unsafe") {
		t.Errorf("CSP %q allows something unsafe", console.CSP)
	}
	_, shell := g.get(t, "", "/console/")
	if strings.Contains(shell, "evt_secret_1") || strings.Contains(shell, "<script>") || strings.Contains(shell, " style=") {
		t.Errorf("the shell holds data, an inline script or an inline style:\n%s", shell)
	}
	resp, _ := g.get(t, "", "/console/static/console.js")
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/javascript") {
		t.Errorf("console.js Content-Type %q", ct)
	}
}

// Without api.tokens no token opens the console, and its answer says so
// rather than that the token is wrong.
func TestDisabledWithoutOperatorTokens(t *testing.T) {
	g := startGatewayAPI(t, "", "")
	if resp, _ := g.get(t, "", "/console/"); resp.StatusCode != http.StatusOK {
		t.Errorf("/console/: status %d, want 200", resp.StatusCode)
	}
	for _, token := range []string{"", taskToken, opToken} {
		resp, body := g.get(t, token, "/console/f/overview")
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "no api.tokens") {
			t.Errorf("token %q: %d %s; want 401 saying no api.tokens are configured", token, resp.StatusCode, body)
		}
	}
}

// A value from outside (type, ID, a kept header, the body, a response
// excerpt) shows as text, never as markup.
func TestEscaping(t *testing.T) {
	g := startGateway(t)
	const evil = `<script>alert(1)</script>`
	id := `e"><script>alert(2)</script>`
	g.post(t, `{"id":"e\"><script>alert(2)</script>","type":"<script>alert(1)</script>","note":"<img src=x onerror=alert(3)>"}`,
		"User-Agent", `<script>alert(4)</script>`)
	g.waitDead(t, 1)
	pages := []string{
		"/console/f/events?source=shop",
		"/console/f/events?type=" + url.QueryEscape(evil),
		"/console/f/event?source=shop&id=" + url.QueryEscape(id),
		"/console/f/dead?route=broken",
	}
	for _, p := range pages {
		resp, body := g.get(t, opToken, p)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", p, resp.StatusCode, body)
		}
		for _, bad := range []string{"<script", "<img", "<b>down"} {
			if strings.Contains(body, bad) {
				t.Errorf("%s shows %q unescaped:\n%s", p, bad, body)
			}
		}
		if !strings.Contains(body, "&lt;script&gt;alert(") {
			t.Errorf("%s does not show the value as text:\n%s", p, body)
		}
	}
	_, body := g.get(t, opToken, "/console/f/event?source=shop&id="+url.QueryEscape(id))
	for _, want := range []string{"&lt;script&gt;alert(4)&lt;/script&gt;", "&lt;img src=x onerror=alert(3)&gt;", "&lt;b&gt;down&lt;/b&gt;"} {
		if !strings.Contains(body, want) {
			t.Errorf("event page lacks %q:\n%s", want, body)
		}
	}
}

// Search by source, type, ID, time range and a JSON field's value.
func TestSearch(t *testing.T) {
	g := startGateway(t)
	g.post(t, `{"id":"a1","type":"order.paid","data":{"customer":"c_1","n":7}}`)
	g.post(t, `{"id":"a2","type":"order.refunded","data":{"customer":"c_2","n":8}}`)
	for _, c := range []struct {
		q    string
		want []string
		not  []string
	}{
		{"source=shop", []string{"a1", "a2"}, nil},
		{"type=order.paid", []string{"a1"}, []string{">a2<"}},
		{"id=a2", []string{"a2"}, []string{">a1<"}},
		{"field=data.customer&value=c_2", []string{"a2"}, []string{">a1<"}},
		{"field=data.n&value=7", []string{"a1"}, []string{">a2<"}},
		{"since=2000-01-01T00:00&until=2000-01-02T00:00", []string{"no event matches"}, []string{">a1<", ">a2<"}},
		{"since=2000-01-01T00:00", []string{"a1", "a2"}, nil},
	} {
		resp, body := g.get(t, opToken, "/console/f/events?"+c.q)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", c.q, resp.StatusCode, body)
		}
		for _, w := range c.want {
			if !strings.Contains(body, w) {
				t.Errorf("%s: lacks %q:\n%s", c.q, w, body)
			}
		}
		for _, n := range c.not {
			if strings.Contains(body, n) {
				t.Errorf("%s: shows %q:\n%s", c.q, n, body)
			}
		}
	}
	for _, q := range []string{"field=a;drop", "field=" + strings.Repeat("a", 300), "since=yesterday", "until=0001-01-01T00:00", "field=a..b"} {
		if resp, body := g.get(t, opToken, "/console/f/events?"+q); resp.StatusCode != 400 {
			t.Errorf("%s: %d, want 400: %s", q, resp.StatusCode, body)
		}
	}
}

// In cluster mode the console shows this gateway's store: the pages work,
// deliveries are named by their API IDs (dl_…), and a retry by that ID,
// as the dead-letter page sends it, delivers.
func TestClusterMode(t *testing.T) {
	nats := gatewaytest.RunNATS(t, 0, t.TempDir())
	g := startGatewayWith(t, fmt.Sprintf("nats: {url: %q, replicas: 1}\ncluster: {enabled: true}", nats.ClientURL()))
	g.post(t, `{"id":"c1","type":"order.paid"}`)
	g.waitDead(t, 1)
	_, dead := g.get(t, opToken, "/console/f/dead?route=broken")
	m := regexp.MustCompile(`class="dead-select" value="(dl_[A-Za-z0-9_-]+)"`).FindStringSubmatch(dead)
	if m == nil {
		t.Fatalf("dead letters page without a dl_ ID:\n%s", dead)
	}
	_, ev := g.get(t, opToken, "/console/f/event?source=shop&id=c1")
	if !strings.Contains(ev, "HTTP 500") || !strings.Contains(ev, m[1]) {
		t.Fatalf("event page without its attempts or delivery ID:\n%s", ev)
	}
	if a, body := g.get(t, opToken, "/console/f/overview"); a.StatusCode != 200 || !strings.Contains(body, `data-route="broken"`) {
		t.Fatalf("overview: %d %s", a.StatusCode, body)
	} else if !strings.Contains(body, "every gateway's counters") || strings.Contains(body, "since it started") {
		t.Errorf("overview's note does not say the charts are every gateway's, kept a day:\n%s", body)
	}
	g.failing.Store(false)
	req, _ := http.NewRequest(http.MethodPost, g.base+"/v1/deliveries/"+m[1]+"/retry", nil)
	req.Header.Set("Authorization", "Bearer "+opToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("retry %s: %d", m[1], resp.StatusCode)
	}
	gatewaytest.WaitFor(t, "c1 delivered", 30*time.Second, func() (bool, string) {
		n := g.delivered(`{"id":"c1","type":"order.paid"}`)
		return n == 1, fmt.Sprint(n)
	})
}

// A list pages on: the next page's cursor (long for a long event ID) is
// taken back.
func TestPaging(t *testing.T) {
	g := startGateway(t)
	pad := strings.Repeat("x", 240)
	for i := range 101 {
		g.post(t, fmt.Sprintf(`{"id":"p%03d%s","type":"t"}`, i, pad))
	}
	g.waitDead(t, 101)
	_, page := g.get(t, opToken, "/console/f/dead?route=broken")
	if n := strings.Count(page, `class="dead-select"`); n != 100 {
		t.Fatalf("first page: %d rows, want 100", n)
	}
	m := regexp.MustCompile(`hx-get="(/console/f/dead\?route=broken&amp;cursor=[^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no next page:\n%s", page)
	}
	ids := regexp.MustCompile(`>(p[0-9]{3})x+<`)
	seen := map[string]bool{}
	for _, id := range ids.FindAllStringSubmatch(page, -1) {
		seen[id[1]] = true
	}
	next := strings.ReplaceAll(m[1], "&amp;", "&")
	a, page := g.get(t, opToken, next)
	last := ids.FindAllStringSubmatch(page, -1)
	if a.StatusCode != 200 || len(last) != 1 || seen[last[0][1]] || len(seen) != 100 {
		t.Fatalf("second page (%d bytes of URL): %d, %d on the first\n%s", len(next), a.StatusCode, len(seen), page)
	}
}

// An event link of the console opens that event, whatever its ID holds
// (a sender's "victim&id=other" opened "victim"; "a+b" opened nothing).
func TestEventLinksEscaped(t *testing.T) {
	g := startGateway(t)
	ids := []string{"victim", "victim&id=other", "a+b", "100%", "x#y"}
	for i, id := range ids {
		g.post(t, fmt.Sprintf(`{"id":%q,"type":"t","n":%d}`, id, i))
	}
	_, list := g.get(t, opToken, "/console/f/events?source=shop")
	links := regexp.MustCompile(`class="event-link" hx-get="([^"]*)"`).FindAllStringSubmatch(list, -1)
	if len(links) != len(ids) {
		t.Fatalf("%d event links, want %d", len(links), len(ids))
	}
	shown := regexp.MustCompile(`<span id="event-id">([^<]*)</span>`)
	seen := map[string]bool{}
	for _, m := range links {
		link := html.UnescapeString(m[1]) // what htmx requests
		resp, page := g.get(t, opToken, link)
		got := shown.FindStringSubmatch(page)
		if resp.StatusCode != 200 || got == nil {
			t.Fatalf("link %q: %d, no event shown", link, resp.StatusCode)
		}
		seen[html.UnescapeString(got[1])] = true
	}
	for _, id := range ids {
		if !seen[id] {
			t.Errorf("no link opens %q (opened %v)", id, seen)
		}
	}
}
