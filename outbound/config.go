package outbound

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"time"

	"github.com/hookgate/hookgate/store"
)

// Route delivers events of some sources to one downstream URL. New fills in
// the default stated on a field left at its zero value.
//
// A Route holds credentials (URL, Secret, Headers): printed with fmt (any
// verb), slog or encoding/json it shows them masked.
type Route struct {
	// Name names the route in deliveries, metrics, logs and
	// Idempotency-Keys, and its consumer ("route_<name>"). Required, and
	// not starting with '_' (TaskRoute).
	Name string
	// Sources are the names of the inbound sources whose events the route
	// takes.
	Sources []string
	// Events are globs on the event type (see Glob). Empty: every event.
	Events []string
	// Filter is a CEL expression over body, source and type (package
	// expr): an event for which it is false, or fails, is recorded
	// filtered (store.StateFiltered) and never sent. Empty: none.
	Filter string
	// URL is the downstream, http or https. Required.
	URL string
	// Proxy is the forward proxy requests go through: http://, https://
	// or socks5:// (userinfo: its credentials). Empty: none (environment
	// proxies are never used).
	Proxy string
	// Secret is a Standard Webhooks signing secret ("whsec_<base64>").
	// Empty: requests are unsigned.
	Secret string
	// Headers are set on every request, over the event's own.
	Headers map[string]string
	// Timeout bounds one attempt. Default 15s.
	Timeout time.Duration
	// Concurrency is the most attempts in flight. Default 8.
	Concurrency int
	// Rate is the most requests per second. 0: unlimited.
	Rate float64
	// Retries is the number of quick in-process retries per round. 0: none.
	Retries int
	// RetryWaitMin and RetryWaitMax bound the jittered backoff between
	// quick retries, and a downstream's Retry-After.
	// Defaults 1s and 30s.
	RetryWaitMin time.Duration
	RetryWaitMax time.Duration
	// BreakerThreshold is the run of consecutive failed rounds after which
	// the route is paused for BreakerCooldown, then probed with one
	// delivery. 0: no breaker. BreakerCooldown defaults to 30s.
	BreakerThreshold int
	BreakerCooldown  time.Duration
	// Schedule is the delay before each long-schedule round after the
	// first fails; past the last the delivery is dead. Default (nil):
	// DefaultSchedule.
	Schedule []time.Duration
}

// Tasks is the task route (TaskRoute): each task names its own URL,
// method and headers, so only signing and the delivery schedule are set
// here. New fills in the default stated on a field left at its zero value.
// Printed with fmt, slog or encoding/json, Secret is masked.
type Tasks struct {
	// Secret is a Standard Webhooks signing secret. Empty: unsigned.
	Secret string
	// Timeout bounds one attempt. Default 15s.
	Timeout time.Duration
	// Concurrency is the most attempts in flight. Default 16.
	Concurrency int
	// Retries, RetryWaitMin, RetryWaitMax and Schedule are as on a Route,
	// with the same defaults.
	Retries      int
	RetryWaitMin time.Duration
	RetryWaitMax time.Duration
	Schedule     []time.Duration
	// PerToken is the most attempts in flight of the tasks one token
	// submitted, so that one task client cannot hold every worker.
	// Default a quarter of Concurrency, at least 1.
	PerToken int
}

// perToken is tc's PerToken, its default applied.
func (tc Tasks) perToken() int {
	if tc.PerToken > 0 {
		return tc.PerToken
	}
	c := tc.Concurrency
	if c <= 0 {
		c = DefaultTaskConcurrency
	}
	return max(c/4, 1)
}

// Defaults of Route and Tasks.
const (
	DefaultTimeout         = 15 * time.Second
	DefaultConcurrency     = 8
	DefaultTaskConcurrency = 16
	DefaultRetryWaitMin    = time.Second
	DefaultRetryWaitMax    = 30 * time.Second
	DefaultBreakerCooldown = 30 * time.Second
)

// DefaultSchedule returns a new copy of the default long schedule, close
// to Stripe's: 1m 5m 30m 1h 2h 4h 8h 12h 12h 12h 12h 12h (about 3 days).
func DefaultSchedule() []time.Duration {
	return []time.Duration{
		time.Minute, 5 * time.Minute, 30 * time.Minute,
		time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour,
		12 * time.Hour, 12 * time.Hour, 12 * time.Hour, 12 * time.Hour, 12 * time.Hour,
	}
}

// withDefaults returns rc with the defaults filled in.
func (rc Route) withDefaults() Route {
	if rc.Timeout <= 0 {
		rc.Timeout = DefaultTimeout
	}
	if rc.Concurrency <= 0 {
		rc.Concurrency = DefaultConcurrency
	}
	if rc.RetryWaitMin <= 0 {
		rc.RetryWaitMin = DefaultRetryWaitMin
	}
	if rc.RetryWaitMax <= 0 {
		rc.RetryWaitMax = DefaultRetryWaitMax
	}
	if rc.BreakerCooldown <= 0 {
		rc.BreakerCooldown = DefaultBreakerCooldown
	}
	if rc.Schedule == nil {
		rc.Schedule = DefaultSchedule()
	}
	return rc
}

// masked is rc as it may be printed: the URL without its userinfo, path
// and query, the secret and the header values masked.
func (rc Route) masked() any {
	type route Route // without the methods
	m := route(rc)
	m.URL, m.Proxy = maskURL(m.URL), maskURL(m.Proxy)
	m.Secret = maskSecret(m.Secret)
	m.Headers = maskHeaders(m.Headers)
	m.Sources, m.Events, m.Schedule = slices.Clone(m.Sources), slices.Clone(m.Events), slices.Clone(m.Schedule)
	return m
}

// Format prints the route with its credentials masked, for every verb.
func (rc Route) Format(f fmt.State, verb rune) {
	_, _ = fmt.Fprintf(f, fmt.FormatString(f, verb), rc.masked()) // Format cannot report an error
}

// LogValue is the route with its credentials masked.
func (rc Route) LogValue() slog.Value { return slog.AnyValue(rc.masked()) }

// MarshalJSON is the route with its credentials masked (slog's JSON
// handler writes a slice of routes with it).
func (rc Route) MarshalJSON() ([]byte, error) { return json.Marshal(rc.masked()) }

func (tc Tasks) masked() any {
	type tasks Tasks // without the methods
	m := tasks(tc)
	m.Secret = maskSecret(m.Secret)
	return m
}

// Format prints tc with its secret masked, for every verb.
func (tc Tasks) Format(f fmt.State, verb rune) {
	_, _ = fmt.Fprintf(f, fmt.FormatString(f, verb), tc.masked()) // Format cannot report an error
}

// LogValue is tc with its secret masked.
func (tc Tasks) LogValue() slog.Value { return slog.AnyValue(tc.masked()) }

// MarshalJSON is tc with its secret masked.
func (tc Tasks) MarshalJSON() ([]byte, error) { return json.Marshal(tc.masked()) }

// route is the Route the task route delivers as.
func (tc Tasks) route() Route {
	if tc.Concurrency <= 0 {
		tc.Concurrency = DefaultTaskConcurrency
	}
	return Route{
		Name:         TaskRoute,
		Sources:      []string{store.TaskSource},
		Secret:       tc.Secret,
		Timeout:      tc.Timeout,
		Concurrency:  tc.Concurrency,
		Retries:      tc.Retries,
		RetryWaitMin: tc.RetryWaitMin,
		RetryWaitMax: tc.RetryWaitMax,
		Schedule:     tc.Schedule,
	}
}

const maskedText = "[masked]"

func maskSecret(s string) string {
	if s == "" {
		return ""
	}
	return maskedText
}

// maskURL keeps a URL's scheme and host: its userinfo, path and query may
// carry credentials (Slack's and Discord's webhook URLs do).
func maskURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return maskSecret(s)
	}
	out := u.Scheme + "://" + u.Host
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		out += "/" + maskedText
	}
	return out
}

// maskHeaders masks every header value: any may be a credential.
func maskHeaders(h map[string]string) map[string]string {
	m := maps.Clone(h)
	for k, v := range m {
		m[k] = maskSecret(v)
	}
	return m
}
