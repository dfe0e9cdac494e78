package outbound

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/jetstream"
	"github.com/hookgate/hookgate/store"
)

func TestRouteDefaults(t *testing.T) {
	t.Parallel()
	sched := []time.Duration{time.Second}
	cases := []struct {
		name string
		in   Route
		want Route
	}{
		{"zero values take the defaults", Route{Name: "r"}, Route{Name: "r",
			Timeout: DefaultTimeout, Concurrency: DefaultConcurrency,
			RetryWaitMin: DefaultRetryWaitMin, RetryWaitMax: DefaultRetryWaitMax,
			BreakerCooldown: DefaultBreakerCooldown, Schedule: DefaultSchedule()}},
		{"set values are kept; 0 retries and no breaker stay 0", Route{Name: "r",
			Timeout: time.Second, Concurrency: 2, RetryWaitMin: time.Millisecond, RetryWaitMax: 2 * time.Millisecond,
			BreakerCooldown: time.Minute, Schedule: sched},
			Route{Name: "r", Timeout: time.Second, Concurrency: 2, RetryWaitMin: time.Millisecond,
				RetryWaitMax: 2 * time.Millisecond, BreakerCooldown: time.Minute, Schedule: sched}},
		{"an empty schedule is kept", Route{Name: "r", Schedule: []time.Duration{}}, Route{Name: "r",
			Timeout: DefaultTimeout, Concurrency: DefaultConcurrency,
			RetryWaitMin: DefaultRetryWaitMin, RetryWaitMax: DefaultRetryWaitMax,
			BreakerCooldown: DefaultBreakerCooldown, Schedule: []time.Duration{}}},
	}
	for _, c := range cases {
		if got := c.in.withDefaults(); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
}

func TestTaskRoute(t *testing.T) {
	t.Parallel()
	r, err := newTaskRoute(Tasks{Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", Retries: 1}, jetstream.DefaultStream, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.cfg.Name != TaskRoute || r.consumer != "tasks" || !r.sources[store.TaskSource] || r.signKey == nil {
		t.Errorf("task route: %+v", r)
	}
	if r.cfg.Concurrency != DefaultTaskConcurrency || r.cfg.Retries != 1 || r.cfg.Timeout != DefaultTimeout ||
		len(r.cfg.Schedule) != len(DefaultSchedule()) || r.cfg.BreakerThreshold != 0 {
		t.Errorf("task route config: %+v", r.cfg)
	}
}

// TestRouteMasked prints a route and the task route every way a log line
// or an error could: no credential may show.
func TestRouteMasked(t *testing.T) {
	t.Parallel()
	secrets := []string{"whsec_s3cr3tSigningKey", "hunter2", "T000/B000/XXXXXXXX", "tok3n-in-query", "Bearer abcdef", "pr0xy-pw"}
	rc := Route{Name: "slack", Sources: []string{"stripe"},
		URL:     "https://user:hunter2@hooks.example.com/services/T000/B000/XXXXXXXX?token=tok3n-in-query",
		Proxy:   "http://hookgate:pr0xy-pw@smokescreen:4750",
		Secret:  "whsec_s3cr3tSigningKey",
		Headers: map[string]string{"Authorization": "Bearer abcdef"},
		Timeout: time.Second}
	tc := Tasks{Secret: "whsec_s3cr3tSigningKey", Concurrency: 3}
	var out bytes.Buffer
	for _, v := range []any{rc, &rc, []Route{rc}, tc, &tc, Config{Tasks: &tc}} {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q"} {
			fmt.Fprintf(&out, verb+"\n", v)
		}
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		out.Write(j)
		slog.New(slog.NewTextHandler(&out, nil)).Info("x", "v", v)
		slog.New(slog.NewJSONHandler(&out, nil)).Info("x", "v", v)
	}
	for _, s := range secrets {
		if strings.Contains(out.String(), s) {
			t.Errorf("%q printed:\n%s", s, out.String())
		}
	}
	for _, s := range []string{"slack", "https://hooks.example.com/[masked]", "http://smokescreen:4750/[masked]", "Authorization", "stripe"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("%q not printed:\n%s", s, out.String())
		}
	}
	// The values themselves are untouched.
	if rc.Secret != "whsec_s3cr3tSigningKey" || rc.Headers["Authorization"] != "Bearer abcdef" {
		t.Errorf("masking changed the route: %+v", rc.masked())
	}
}

// A token's tasks take at most a quarter of the task workers by default,
// at least one; PerToken sets it; slots come back.
func TestTasksPerToken(t *testing.T) {
	for _, c := range []struct {
		tc   Tasks
		want int
	}{
		{Tasks{}, DefaultTaskConcurrency / 4},
		{Tasks{Concurrency: 2}, 1},
		{Tasks{Concurrency: 40}, 10},
		{Tasks{Concurrency: 40, PerToken: 3}, 3},
	} {
		if got := c.tc.perToken(); got != c.want {
			t.Errorf("%+v: per token %d, want %d", c.tc, got, c.want)
		}
	}
	s := newScopeSlots(2)
	for i, step := range []struct {
		give  bool
		scope string
		want  bool
	}{
		{false, "a", true}, {false, "a", true}, {false, "a", false}, // two slots of a
		{false, "b", true},                                         // b's own
		{true, "a", true}, {false, "a", true}, {false, "a", false}, // one given back, taken again
	} {
		if step.give {
			s.give(step.scope)
			continue
		}
		if got := s.take(step.scope); got != step.want {
			t.Fatalf("step %d: take(%q) = %v, want %v", i, step.scope, got, step.want)
		}
		if full := s.full(step.scope); full != (s.busy[step.scope] == 2) {
			t.Fatalf("step %d: full(%q) = %v with %d busy", i, step.scope, full, s.busy[step.scope])
		}
	}
	// A task whose scope stays full comes back later each time.
	for n, want := range map[uint64]time.Duration{0: 2 * time.Second, 1: 2 * time.Second, 2: 4 * time.Second,
		10: 20 * time.Second, 15: 30 * time.Second, 1000: 30 * time.Second} {
		if got := scopeBusyWait(n); got != want {
			t.Errorf("scopeBusyWait(%d) = %v, want %v", n, got, want)
		}
	}
}
