package app

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v83/webhook"

	"github.com/hookgate/hookgate/config"
)

// fakeClock runs the limiter's timers when the test advances it.
type fakeClock struct {
	now    time.Time
	timers []fakeTimer
}

type fakeTimer struct {
	at time.Time
	f  func()
}

func (c *fakeClock) clock() limitClock {
	return limitClock{
		now:       func() time.Time { return c.now },
		afterFunc: func(d time.Duration, f func()) { c.timers = append(c.timers, fakeTimer{c.now.Add(d), f}) },
	}
}

func (c *fakeClock) advance(d time.Duration) {
	c.now = c.now.Add(d)
	for {
		i := slices.IndexFunc(c.timers, func(t fakeTimer) bool { return !t.at.After(c.now) })
		if i < 0 {
			return
		}
		f := c.timers[i].f
		c.timers = slices.Delete(c.timers, i, i+1)
		f()
	}
}

// step logs n records, or advances the clock.
type step struct {
	level   slog.Level
	msg     string
	n       int
	attrs   []any // given to logger.With
	advance time.Duration
}

func TestLogLimit(t *testing.T) {
	warn := func(msg string, n int) step { return step{level: slog.LevelWarn, msg: msg, n: n} }
	wait := func(d time.Duration) step { return step{advance: d} }
	tests := []struct {
		name  string
		steps []step
		want  []string // the lines written, time left out
	}{
		{"few pass", []step{warn("refused", 3), wait(time.Minute)}, []string{
			`level=WARN msg=refused`, `level=WARN msg=refused`, `level=WARN msg=refused`}},
		{"a flood is cut, then summed up when its window ends", []step{warn("refused", 12), wait(9 * time.Second)}, []string{
			`level=WARN msg=refused`, `level=WARN msg=refused`, `level=WARN msg=refused`,
			`level=WARN msg=refused`, `level=WARN msg=refused`}},
		{"the summary", []step{warn("refused", 12), wait(10 * time.Second)}, []string{
			`level=WARN msg=refused`, `level=WARN msg=refused`, `level=WARN msg=refused`,
			`level=WARN msg=refused`, `level=WARN msg=refused`,
			`level=WARN msg="7 more like this in the last 10s" message=refused`}},
		{"a new window lets a burst through again", []step{warn("refused", 6), wait(10 * time.Second), warn("refused", 6), wait(10 * time.Second)}, []string{
			`level=WARN msg=refused`, `level=WARN msg=refused`, `level=WARN msg=refused`,
			`level=WARN msg=refused`, `level=WARN msg=refused`,
			`level=WARN msg="1 more like this in the last 10s" message=refused`,
			`level=WARN msg=refused`, `level=WARN msg=refused`, `level=WARN msg=refused`,
			`level=WARN msg=refused`, `level=WARN msg=refused`,
			`level=WARN msg="1 more like this in the last 10s" message=refused`}},
		{"messages are counted apart", []step{warn("a", 6), warn("b", 2), wait(10 * time.Second)}, []string{
			`level=WARN msg=a`, `level=WARN msg=a`, `level=WARN msg=a`, `level=WARN msg=a`, `level=WARN msg=a`,
			`level=WARN msg=b`, `level=WARN msg=b`,
			`level=WARN msg="1 more like this in the last 10s" message=a`}},
		{"levels are counted apart", []step{warn("x", 5), {level: slog.LevelError, msg: "x", n: 7}, wait(10 * time.Second)}, []string{
			`level=WARN msg=x`, `level=WARN msg=x`, `level=WARN msg=x`, `level=WARN msg=x`, `level=WARN msg=x`,
			`level=ERROR msg=x`, `level=ERROR msg=x`, `level=ERROR msg=x`, `level=ERROR msg=x`, `level=ERROR msg=x`,
			`level=ERROR msg="2 more like this in the last 10s" message=x`}},
		{"info is never limited", []step{{level: slog.LevelInfo, msg: "i", n: 7}, wait(10 * time.Second)}, []string{
			`level=INFO msg=i`, `level=INFO msg=i`, `level=INFO msg=i`, `level=INFO msg=i`, `level=INFO msg=i`,
			`level=INFO msg=i`, `level=INFO msg=i`}},
		{"loggers with attributes share the count; the summary has the attributes of the first dropped",
			[]step{{level: slog.LevelWarn, msg: "r", n: 4, attrs: []any{"component", "a"}},
				{level: slog.LevelWarn, msg: "r", n: 3, attrs: []any{"component", "b"}}, wait(10 * time.Second)}, []string{
				`level=WARN msg=r component=a`, `level=WARN msg=r component=a`, `level=WARN msg=r component=a`,
				`level=WARN msg=r component=a`, `level=WARN msg=r component=b`,
				`level=WARN msg="2 more like this in the last 10s" component=b message=r`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			text := slog.NewTextHandler(&buf, &slog.HandlerOptions{
				ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
					if a.Key == slog.TimeKey && len(groups) == 0 {
						return slog.Attr{}
					}
					return a
				}})
			clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			log := slog.New(newLimitHandler(text, clock.clock(), logWindow, logBurst))
			for _, s := range tt.steps {
				if s.advance > 0 {
					clock.advance(s.advance)
					continue
				}
				l := log.With(s.attrs...)
				for i := 0; i < s.n; i++ {
					l.Log(context.Background(), s.level, s.msg)
				}
			}
			got := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if !slices.Equal(got, tt.want) {
				t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// syncWriter collects the process log.
type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// A flood of refused requests through the real app writes a bounded log;
// /metrics still counts every refusal.
func TestRefusalFloodLogBounded(t *testing.T) {
	const apiToken = "log-limit-token-0123456789"
	cfg := testConfig(t, fmt.Sprintf("api: {tokens: [%q]}\n", apiToken))
	var out syncWriter
	a := New(cfg, NewLogger(&out, config.Log{Level: "info", Format: "text"}))
	if err := a.Start(context.Background()); err != nil {
		a.Stop(context.Background())
		t.Fatal(err)
	}
	defer a.Stop(context.Background())
	base := "http://" + a.Addr()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	do := func(req *http.Request) {
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}

	const n = 300
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := `{"id":"evt_forged","type":"x"}`
			forged := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(body), Secret: "whsec_wrong"})
			for i := 0; i < n/4; i++ {
				req, _ := http.NewRequest(http.MethodPost, base+"/webhooks/stripe", strings.NewReader(body))
				req.Header.Set("Stripe-Signature", forged.Header)
				do(req)
				req, _ = http.NewRequest(http.MethodGet, base+"/v1/deliveries", nil)
				req.Header.Set("Authorization", "Bearer not-a-token-0123456789")
				do(req)
			}
		}()
	}
	wg.Wait()
	// However long the flood took, each kind writes at most a burst and a
	// summary per window.
	windows := int(time.Since(start)/logWindow) + 1
	log := out.String()
	for _, msg := range []string{"inbound request refused: signature refused", "api request refused: bad or missing bearer token"} {
		lines := strings.Count(log, "msg=\""+msg+"\"")
		if lines < 1 || lines > windows*logBurst {
			t.Errorf("%q written %d times for %d refusals in %d window(s), want 1 to %d", msg, lines, n, windows, windows*logBurst)
		}
	}
	if lines := strings.Count(log, "\n"); lines > 10*windows*(logBurst+1) {
		t.Errorf("%d log lines for %d refusals:\n%s", lines, 2*n, log)
	}

	resp, err := client.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var metrics bytes.Buffer
	metrics.ReadFrom(resp.Body)
	m := regexp.MustCompile(`hookgate_inbound_requests_total\{outcome="unauthorized",source="stripe"\} (\d+)`).FindStringSubmatch(metrics.String())
	if m == nil {
		t.Fatalf("no unauthorized counter in /metrics:\n%s", metrics.String())
	}
	if got, _ := strconv.Atoi(m[1]); got != n {
		t.Fatalf("/metrics counted %d refusals, want %d", got, n)
	}
}
