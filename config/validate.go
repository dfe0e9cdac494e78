package config

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"

	"github.com/hookgate/hookgate/egress"
	"github.com/hookgate/hookgate/expr"
	"github.com/hookgate/hookgate/signature"
)

// namePattern is the pattern of source and route names.
var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// MinTokenLength is the shortest accepted api.tokens entry.
const MinTokenLength = 16

// Upper bounds of integer keys that size channels, goroutines or memory at
// start: past them a value would overflow or exhaust memory.
const (
	MaxBatchMax      = 1 << 16 // store.batch_max
	MaxWALMaxMB      = 1 << 20 // store.wal_max_mb: 1 TiB
	MaxMemoryLimitMB = 1 << 30 // nats.memory_limit_mb: 1 PiB, far from overflowing << 20
	MaxConcurrency   = 10000   // routes[].concurrency, tasks.concurrency and tasks.token_concurrency
)

// MaxStreamName bounds nats.stream: the deployment's names
// (KV_HOOKGATE_DELIVERIES_<stream> the longest) must fit JetStream's 255.
const MaxStreamName = 200

// validator collects problems.
type validator struct {
	errs []error
	set  func(path string) bool
}

func (v *validator) errorf(path, format string, args ...any) {
	v.errs = append(v.errs, &Error{Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (v *validator) positiveDuration(path string, d time.Duration) {
	if d <= 0 {
		v.errorf(path, "must be positive, got %s", d)
	}
}

func (v *validator) positiveInt(path string, n int) {
	if n <= 0 {
		v.errorf(path, "must be positive, got %d", n)
	}
}

// atMost checks that n is positive and at most most.
func (v *validator) atMost(path string, n, most int) {
	if n > most {
		v.errorf(path, "must be at most %d, got %d", most, n)
	} else {
		v.positiveInt(path, n)
	}
}

// validate checks a decoded configuration with defaults applied.
func (c *Config) validate(set func(path string) bool) error {
	v := &validator{set: set}

	if host, port, err := net.SplitHostPort(c.Listen); err != nil || !validPort(port) {
		v.errorf("listen", "must be host:port with a port number, e.g. 127.0.0.1:8080 or :8080")
	} else if strings.ContainsAny(host, " /") {
		v.errorf("listen", "invalid host %q", host)
	}
	v.positiveDuration("shutdown_timeout", c.ShutdownTimeout)

	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		v.errorf("log.level", "unknown level %q (want debug, info, warn or error)", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		v.errorf("log.format", "unknown format %q (want text or json)", c.Log.Format)
	}

	c.validateNATS(v)
	v.atMost("store.batch_max", c.Store.BatchMax, MaxBatchMax)
	v.positiveInt("store.readers", c.Store.Readers)
	v.atMost("store.wal_max_mb", c.Store.WALMaxMB, MaxWALMaxMB)

	c.validateSources(v)
	c.validateTokens(v)
	c.validateRoutes(v)
	c.validateTasks(v)
	v.positiveDuration("retention.events", c.Retention.Events)
	v.positiveDuration("retention.attempts", c.Retention.Attempts)
	v.positiveDuration("retention.interval", c.Retention.Interval)
	c.validateHTTP(v)
	if c.Cluster.Enabled && c.NATS.URL == "" {
		v.errorf("cluster.enabled", "needs nats.url: the gateways share an external NATS cluster")
	}
	v.positiveDuration("cluster.claim_ttl", c.Cluster.ClaimTTL)
	v.positiveDuration("cluster.claim_timeout", c.Cluster.ClaimTimeout)
	v.positiveDuration("cluster.records_ttl", c.Cluster.RecordsTTL)
	v.positiveDuration("cluster.takes_ttl", c.Cluster.TakesTTL)
	if c.Metrics.Token != "" {
		v.token("metrics.token", c.Metrics.Token)
	}
	c.validateAlerts(v)
	return errors.Join(v.errs...)
}

// validateAlerts checks alerts: a URL and its signing secret, both or none.
func (c *Config) validateAlerts(v *validator) {
	a := &c.Alerts
	switch {
	case a.URL == "" && a.Secret != "":
		v.errorf("alerts.url", "required with alerts.secret")
	case a.URL != "" && a.Secret == "":
		v.errorf("alerts.secret", "required with alerts.url")
	}
	// The URL is not echoed: it may carry a token (Slack's do).
	if a.URL != "" {
		if u, err := url.Parse(a.URL.Reveal()); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
			v.errorf("alerts.url", "must be an absolute http:// or https:// URL with a host")
		}
	}
	if a.Secret != "" {
		if _, err := signature.DecodeStandardSecret(a.Secret.Reveal()); err != nil {
			v.errorf("alerts.secret", "invalid standard webhooks secret: %v", err)
		}
	}
	v.positiveDuration("alerts.dead_letter_interval", a.DeadLetterInterval)
	v.positiveDuration("alerts.outbox_age", a.OutboxAge)
}

// validateTokens checks api.tokens and tasks.tokens: a token is an
// operator's or a task client's, never both.
func (c *Config) validateTokens(v *validator) {
	operators := map[Secret]bool{}
	for _, tok := range c.API.Tokens {
		operators[tok] = true
	}
	for _, list := range []struct {
		key    string
		tokens Secrets
	}{{"api.tokens", c.API.Tokens}, {"tasks.tokens", c.Tasks.Tokens}} {
		for i, tok := range list.tokens {
			p := fmt.Sprintf("%s[%d]", list.key, i)
			if v.token(p, tok) && list.key == "tasks.tokens" && operators[tok] {
				v.errorf(p, "also in api.tokens: a token is an operator's or a task client's, not both")
			}
		}
	}
}

// token checks a bearer token: long enough, and without spaces or control
// characters, which no client can send in a header. It reports whether the
// token is valid.
func (v *validator) token(p string, tok Secret) bool {
	switch {
	case tok == "":
		v.errorf(p, "empty token")
	case utf8.RuneCountInString(tok.Reveal()) < MinTokenLength:
		v.errorf(p, "too short: a token must be at least %d characters", MinTokenLength)
	case strings.IndexFunc(tok.Reveal(), func(r rune) bool { return r <= ' ' || r == 0x7f || !unicode.IsPrint(r) }) >= 0:
		v.errorf(p, "must not contain spaces or control characters")
	default:
		return true
	}
	return false
}

func (c *Config) validateTasks(v *validator) {
	t := &c.Tasks
	if t.Secret != "" {
		if _, err := signature.DecodeStandardSecret(t.Secret.Reveal()); err != nil {
			v.errorf("tasks.secret", "invalid standard webhooks secret: %v", err)
		}
	}
	if _, err := egress.New(t.Allow); err != nil {
		var ee *egress.EntryError
		for _, e := range unjoin(err) {
			if errors.As(e, &ee) {
				v.errorf(fmt.Sprintf("tasks.allow[%d]", ee.Index), "%s", ee.Reason)
			} else {
				v.errorf("tasks.allow", "%v", e)
			}
		}
	}
	v.positiveDuration("tasks.key_ttl", t.KeyTTL)
	v.positiveDuration("tasks.timeout", t.Timeout)
	v.proxy("tasks.proxy", t.Proxy)
	v.atMost("tasks.concurrency", t.Concurrency, MaxConcurrency)
	v.positiveInt("tasks.max_body", t.MaxBody)
	if t.Retries < 0 {
		v.errorf("tasks.retries", "must be >= 0, got %d", t.Retries)
	}
	if t.TokenConcurrency < 0 {
		v.errorf("tasks.token_concurrency", "must be 0 (a quarter of tasks.concurrency) or more, got %d", t.TokenConcurrency)
	} else if t.TokenConcurrency > MaxConcurrency {
		v.errorf("tasks.token_concurrency", "must be at most %d, got %d", MaxConcurrency, t.TokenConcurrency)
	}
	v.positiveDuration("tasks.retry_wait_min", t.RetryWaitMin)
	v.positiveDuration("tasks.retry_wait_max", t.RetryWaitMax)
	if t.RetryWaitMin > t.RetryWaitMax {
		v.errorf("tasks.retry_wait_min", "must not exceed retry_wait_max (%s)", t.RetryWaitMax)
	}
	if len(t.Schedule) == 0 {
		v.errorf("tasks.schedule", "must not be empty (leave it out for the default)")
	}
	for j, d := range t.Schedule {
		v.positiveDuration(fmt.Sprintf("tasks.schedule[%d]", j), d)
	}
}

func (c *Config) validateHTTP(v *validator) {
	h := &c.HTTP
	v.positiveInt("http.max_connections", h.MaxConnections)
	v.positiveDuration("http.read_timeout", h.ReadTimeout)
	v.positiveDuration("http.write_timeout", h.WriteTimeout)
	v.positiveDuration("http.idle_timeout", h.IdleTimeout)
	if h.BodyMemory <= 0 {
		v.positiveInt("http.body_memory", h.BodyMemory)
		return
	}
	// A body at its endpoint's limit must fit, or it could never be read.
	largest, key := c.Tasks.MaxBody, "tasks.max_body"
	for i, s := range c.Sources {
		if s.MaxBody > largest {
			largest, key = s.MaxBody, fmt.Sprintf("sources[%d].max_body", i)
		}
	}
	if h.BodyMemory < largest {
		v.errorf("http.body_memory", "must be at least %s (%d), got %d", key, largest, h.BodyMemory)
	}
}

// unjoin splits an errors.Join error into its parts.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func validPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0 && n <= 65535
}

func (c *Config) validateNATS(v *validator) {
	n := &c.NATS
	if n.URL != "" {
		v.natsURL(n.URL.Reveal())
	}
	if n.Port < 0 || n.Port > 65535 {
		v.errorf("nats.port", "must be between 0 and 65535, got %d", n.Port)
	}
	v.positiveDuration("nats.sync_interval", n.SyncInterval)
	if n.MemoryLimitMB < 0 {
		v.errorf("nats.memory_limit_mb", "must be 0 (none) or more, got %d", n.MemoryLimitMB)
	} else if n.MemoryLimitMB > MaxMemoryLimitMB {
		v.errorf("nats.memory_limit_mb", "must be at most %d (1 PiB), got %d", MaxMemoryLimitMB, n.MemoryLimitMB)
	}
	if strings.ContainsAny(n.Stream, " \t\r\n.*>/\\") {
		v.errorf("nats.stream", "invalid stream name %q: no spaces, '.', '*', '>' or path separators", n.Stream)
	} else if len(n.Stream) > MaxStreamName {
		v.errorf("nats.stream", "must be at most %d bytes (the deployment's bucket names, such as KV_HOOKGATE_DELIVERIES_<stream>, must fit JetStream's 255), got %d", MaxStreamName, len(n.Stream))
	}
	v.positiveDuration("nats.duplicate_window", n.DuplicateWindow)
	if n.Retention != "interest" && n.Retention != "limits" {
		v.errorf("nats.retention", "unknown retention %q (want interest or limits)", n.Retention)
	}
	switch {
	case n.Replicas > 1 && n.URL == "":
		v.errorf("nats.replicas", "must be 1 with the embedded server (no nats.url), got %d: replicas need an external NATS cluster", n.Replicas)
	case n.Replicas > 5:
		v.errorf("nats.replicas", "must be at most 5 (JetStream's limit), got %d", n.Replicas)
	default:
		v.positiveInt("nats.replicas", n.Replicas)
	}
	v.positiveDuration("nats.connect_timeout", n.ConnectTimeout)
	v.positiveDuration("nats.outbox_max_age", n.OutboxMaxAge)
	v.natsAuth(n)
}

// natsURL checks nats.url's servers as nats.go reads them: host:port alone
// takes the scheme of the servers before it (nats:// first), and ws:// or
// wss:// servers cannot be mixed with nats:// or tls:// ones. A server is
// never echoed: it may carry a token or password.
func (v *validator) natsURL(list string) {
	servers := strings.Split(list, ",")
	if slices.ContainsFunc(servers, func(s string) bool { return strings.TrimSpace(s) == "" }) {
		v.errorf("nats.url", "empty server in comma-separated list")
		return
	}
	ws, seen := false, false // the first server's kind, once seen
	for i, s := range servers {
		p := fmt.Sprintf("nats.url[%d]", i)
		s = strings.TrimSpace(s)
		bare := !strings.Contains(s, "://")
		if bare {
			s = "nats://" + s
		}
		u, err := url.Parse(s)
		if err != nil {
			v.errorf(p, "not a valid URL (want nats://host:port, tls://, ws://, wss:// or host:port)")
			continue
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			v.errorf(p, "unknown scheme %q (want nats, tls, ws or wss)", u.Scheme)
			continue
		}
		if port := u.Port(); port != "" {
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				v.errorf(p, "port must be between 1 and 65535")
				continue
			}
		}
		isWS := u.Scheme == "ws" || u.Scheme == "wss"
		switch {
		case !seen:
			ws, seen = isWS, true
		case !bare && isWS != ws:
			v.errorf(p, "cannot mix ws:// or wss:// servers with nats:// or tls:// ones")
		}
	}
}

func (c *Config) validateSources(v *validator) {
	// Without sources the gateway may still forward tasks: /v1/tasks is
	// open to tasks.tokens and api.tokens.
	if len(c.Sources) == 0 && len(c.Tasks.Tokens) == 0 && len(c.API.Tokens) == 0 {
		v.errorf("sources", "nothing to serve: add a source, or tasks.tokens (or api.tokens) for a gateway that only forwards tasks")
	}
	seen := map[string]bool{}
	for i := range c.Sources {
		s := &c.Sources[i]
		p := fmt.Sprintf("sources[%d]", i)
		v.name(p, "source", s.Name, seen)
		scheme, known := v.verify(p, s.Verify)
		v.sourceSecrets(p, s, scheme, known)
		v.positiveDuration(p+".tolerance", s.Tolerance)
		v.positiveInt(p+".max_body", s.MaxBody)
		v.hmac(p, s, known)
		v.location(p, "id", s.IDHeader, s.IDField, known && s.IDExpr == "" && scheme.ID == (signature.Location{}), s.Verify)
		v.location(p, "type", s.TypeHeader, s.TypeField, false, s.Verify)
		v.expression(p, "id", s.IDExpr, s.IDHeader, s.IDField, expr.All)
		v.expression(p, "type", s.TypeExpr, s.TypeHeader, s.TypeField, expr.Body|expr.Headers|expr.Source)
	}
}

// name checks the name at p of a source or route (kind), unique among
// those seen.
func (v *validator) name(p, kind, name string, seen map[string]bool) {
	switch {
	case name == "":
		v.errorf(p+".name", "required")
	case !namePattern.MatchString(name):
		v.errorf(p+".name", "invalid name %q: want 1 to 64 of a-z, 0-9, _ and -, starting with a letter or digit", name)
	case seen[name]:
		v.errorf(p+".name", "duplicate %s %q", kind, name)
	}
	seen[name] = true
}

// verify checks a source's verify scheme and returns it if it is known.
func (v *validator) verify(p, name string) (signature.Scheme, bool) {
	scheme, ok := signature.Lookup(name)
	if ok {
		return scheme, true
	}
	names := signature.Names()
	want := strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	if name == "" {
		v.errorf(p+".verify", "required (%s)", want)
	} else {
		v.errorf(p+".verify", "unknown scheme %q (want %s)", name, want)
	}
	return scheme, false
}

// sourceSecrets checks a source's secrets against its scheme (known: the
// scheme is one of the registered).
func (v *validator) sourceSecrets(p string, s *Source, scheme signature.Scheme, known bool) {
	switch {
	case !known:
	case scheme.Unsigned:
		if len(s.Secrets) > 0 {
			v.errorf(p+".secrets", "not used with verify: %s", s.Verify)
		}
	case len(s.Secrets) == 0:
		v.errorf(p+".secrets", "required for verify: %s", s.Verify)
	default:
		for j, sec := range s.Secrets.Reveal() {
			sp := fmt.Sprintf("%s.secrets[%d]", p, j)
			switch {
			case sec == "":
				v.errorf(sp, "empty secret")
			case strings.TrimSpace(sec) != sec:
				v.errorf(sp, "has leading or trailing whitespace")
			case scheme.CheckSecret != nil:
				if err := scheme.CheckSecret(sec); err != nil {
					v.errorf(sp, "%v", err)
				}
			}
		}
	}
}

// hmac checks a source's hmac settings: required with verify: hmac, and
// only allowed with it.
func (v *validator) hmac(p string, s *Source, known bool) {
	hp := p + ".hmac"
	if s.Verify != "hmac" {
		if known && (v.set(hp) || s.HMAC != (HMAC{})) {
			v.errorf(hp, "only allowed with verify: hmac")
		}
		return
	}
	if s.HMAC.Header == "" {
		v.errorf(hp+".header", "required for verify: hmac")
	} else if !httpguts.ValidHeaderFieldName(s.HMAC.Header) {
		v.errorf(hp+".header", "invalid header name %q", s.HMAC.Header)
	}
	switch s.HMAC.Algorithm {
	case "sha256", "sha512":
	default:
		v.errorf(hp+".algorithm", "unknown algorithm %q (want sha256 or sha512)", s.HMAC.Algorithm)
	}
	switch s.HMAC.Encoding {
	case "hex", "base64":
	default:
		v.errorf(hp+".encoding", "unknown encoding %q (want hex or base64)", s.HMAC.Encoding)
	}
}

// location checks a <what>_header / <what>_field pair.
func (v *validator) location(p, what, header, field string, required bool, verify string) {
	switch {
	case header != "" && field != "":
		v.errorf(p, "%s_header and %s_field are mutually exclusive", what, what)
	case header == "" && field == "" && required:
		v.errorf(p, "one of %s_header or %s_field is required for verify: %s", what, what, verify)
	}
	if header != "" && !httpguts.ValidHeaderFieldName(header) {
		v.errorf(p+"."+what+"_header", "invalid header name %q", header)
	}
	if field != "" && !validFieldPath(field) {
		v.errorf(p+"."+what+"_field", "invalid field path %q: want dot-separated names such as \"data.id\"", field)
	}
}

// expression checks a source's <what>_expr: compiled and type-checked with
// vars, and not set beside <what>_header or <what>_field.
func (v *validator) expression(p, what, src, header, field string, vars expr.Vars) {
	if src == "" {
		return
	}
	if header != "" || field != "" {
		v.errorf(p, "%s_expr and %s_header / %s_field are mutually exclusive", what, what, what)
	}
	if _, err := expr.Compile(src, expr.Text, vars); err != nil {
		v.errorf(p+"."+what+"_expr", "%v", err)
	}
}

// validFieldPath reports whether s is dot-separated non-empty segments
// without spaces or control characters.
func validFieldPath(s string) bool {
	for _, seg := range strings.Split(s, ".") {
		if seg == "" || strings.IndexFunc(seg, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0 {
			return false
		}
	}
	return true
}

func (c *Config) validateRoutes(v *validator) {
	seen := map[string]bool{}
	for i := range c.Routes {
		r := &c.Routes[i]
		p := fmt.Sprintf("routes[%d]", i)
		v.name(p, "route", r.Name, seen)
		c.routeSources(v, p, r.Sources)
		v.eventPatterns(p, r.Events)
		if r.Filter != "" {
			if _, err := expr.Compile(r.Filter, expr.Bool, expr.Body|expr.Source|expr.Type); err != nil {
				if _, all := expr.Compile(r.Filter, expr.Bool, expr.All); all == nil {
					// Deliveries do not carry the request's headers.
					err = errors.New("headers are not available to a route filter (only body, source and type)")
				}
				v.errorf(p+".filter", "%v", err)
			}
		}
		v.target(p, r)
		v.positiveDuration(p+".timeout", r.Timeout)
		v.headers(p, r.Headers)
		v.delivery(p, r)
	}
}

// routeSources checks a route's sources: each one configured, once.
func (c *Config) routeSources(v *validator, p string, sources []string) {
	if len(sources) == 0 {
		v.errorf(p+".sources", "at least one source is required")
	}
	listed := map[string]bool{}
	for j, name := range sources {
		sp := fmt.Sprintf("%s.sources[%d]", p, j)
		switch _, ok := c.Source(name); {
		case name == "":
			v.errorf(sp, "empty source name")
		case !ok:
			v.errorf(sp, "unknown source %q", name)
		case listed[name]:
			v.errorf(sp, "source %q listed twice", name)
		}
		listed[name] = true
	}
}

// eventPatterns checks a route's event type patterns.
func (v *validator) eventPatterns(p string, events []string) {
	for j, e := range events {
		ep := fmt.Sprintf("%s.events[%d]", p, j)
		if e == "" {
			v.errorf(ep, "empty pattern")
		} else if !utf8.ValidString(e) || strings.IndexFunc(e, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			v.errorf(ep, "pattern must be printable characters")
		}
	}
}

// target checks where a route delivers: its URL and signing secret.
func (v *validator) target(p string, r *Route) {
	// The URL is not echoed: it may carry credentials.
	if r.URL == "" {
		v.errorf(p+".url", "required")
	} else if u, err := url.Parse(r.URL.Reveal()); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" {
		v.errorf(p+".url", "must be an absolute http:// or https:// URL with a host")
	}
	v.proxy(p+".proxy", r.Proxy)
	if r.Secret != "" {
		if _, err := signature.DecodeStandardSecret(r.Secret.Reveal()); err != nil {
			v.errorf(p+".secret", "invalid standard webhooks secret: %v", err)
		}
	}
}

// proxy checks a route's or tasks' proxy; the URL is not echoed.
func (v *validator) proxy(p string, u URL) {
	if u == "" {
		return
	}
	if _, err := egress.ParseProxy(u.Reveal()); err != nil {
		v.errorf(p, "%v", err)
	}
}

// headers checks a route's extra request headers: valid names, unique
// case-insensitively, and values without control characters.
func (v *validator) headers(p string, hs Headers) {
	seen := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(hs)) {
		val := hs[name]
		hp := joinPath(p+".headers", name)
		if !httpguts.ValidHeaderFieldName(name) {
			v.errorf(hp, "invalid header name")
		} else if other, dup := seen[strings.ToLower(name)]; dup {
			v.errorf(hp, "same header as %q (names are case-insensitive)", other)
		}
		seen[strings.ToLower(name)] = name
		if !httpguts.ValidHeaderFieldValue(val) {
			v.errorf(hp, "value must not contain CR, LF or other control characters")
		}
	}
}

// delivery checks a route's pacing, retries, breaker and schedule.
func (v *validator) delivery(p string, r *Route) {
	v.atMost(p+".concurrency", r.Concurrency, MaxConcurrency)
	if math.IsNaN(r.Rate) || math.IsInf(r.Rate, 0) || r.Rate < 0 {
		v.errorf(p+".rate", "must be a number >= 0 (0: unlimited), got %v", r.Rate)
	}
	if r.Retries < 0 {
		v.errorf(p+".retries", "must be >= 0, got %d", r.Retries)
	}
	if r.BreakerThreshold < 0 {
		v.errorf(p+".breaker_threshold", "must be >= 0 (0: no breaker), got %d", r.BreakerThreshold)
	}
	v.positiveDuration(p+".breaker_cooldown", r.BreakerCooldown)
	v.positiveDuration(p+".retry_wait_min", r.RetryWaitMin)
	v.positiveDuration(p+".retry_wait_max", r.RetryWaitMax)
	if r.RetryWaitMin > r.RetryWaitMax {
		v.errorf(p+".retry_wait_min", "must not exceed retry_wait_max (%s)", r.RetryWaitMax)
	}
	if len(r.Schedule) == 0 {
		v.errorf(p+".schedule", "must not be empty (leave it out for the default)")
	}
	for j, d := range r.Schedule {
		v.positiveDuration(fmt.Sprintf("%s.schedule[%d]", p, j), d)
	}
}
