package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

const testStandardSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// env returns a lookupEnv over m.
func env(m map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

func mustParse(t *testing.T, src string, vars map[string]string) *Config {
	t.Helper()
	c, err := Parse([]byte(src), env(vars))
	if err != nil {
		t.Fatalf("Parse: %v\n--- config:\n%s", err, src)
	}
	return c
}

func parseErr(t *testing.T, src string, vars map[string]string) error {
	t.Helper()
	_, err := Parse([]byte(src), env(vars))
	if err == nil {
		t.Fatalf("Parse succeeded, want an error\n--- config:\n%s", src)
	}
	return err
}

// errorLines returns each message of a (possibly joined) error.
func errorLines(err error) []string {
	return strings.Split(err.Error(), "\n")
}

// wantError checks that one of err's messages is exactly want.
func wantError(t *testing.T, err error, want string) {
	t.Helper()
	if !slices.Contains(errorLines(err), want) {
		t.Errorf("error\n%v\nhas no line %q", err, want)
	}
}

// wantErrorMatch checks that one of err's messages matches the pattern.
func wantErrorMatch(t *testing.T, err error, pattern string) {
	t.Helper()
	re := regexp.MustCompile(pattern)
	for _, l := range errorLines(err) {
		if re.MatchString(l) {
			return
		}
	}
	t.Errorf("error\n%v\nhas no line matching %q", err, pattern)
}

func TestFullExample(t *testing.T) {
	data, err := os.ReadFile("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(data, env(map[string]string{
		"SHOP_SECRET":        "s3cr\"et: with: colons",
		"HOOKGATE_API_TOKEN": "0123456789abcdef0123",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Listen:          "0.0.0.0:9090",
		DataDir:         "/var/lib/hookgate",
		ShutdownTimeout: 45 * time.Second,
		Log:             Log{Level: "debug", Format: "json"},
		NATS: NATS{
			URL:             "nats://n1:4222,nats://n2:4222",
			Port:            4223,
			StoreDir:        "/var/lib/hookgate/js",
			SyncInterval:    30 * time.Second,
			SyncAlways:      true,
			MemoryLimitMB:   256,
			Stream:          "HG_EVENTS",
			Retention:       "limits",
			DuplicateWindow: 10 * time.Minute,
			Replicas:        3,
			ConnectTimeout:  20 * time.Second,
			OutboxMaxAge:    2 * time.Minute,
			Credentials:     "testdata/nats/hookgate.creds",
			TLS:             NATSTLS{CAFile: "testdata/nats/ca.pem", CertFile: "testdata/nats/client.pem", KeyFile: "testdata/nats/client.key"},
		},
		Store: Store{Path: "/var/lib/hookgate/db.sqlite", BatchMax: 256, Readers: 8, WALMaxMB: 256, WALZeroFill: true},
		Sources: []Source{
			{
				Name: "stripe", Verify: "stripe", Secrets: Secrets{"whsec_old", "whsec_new"},
				Tolerance: 10 * time.Minute, MaxBody: 2097152,
				IDField: "id", TypeField: "type",
			},
			{
				Name: "shop", Verify: "hmac", Secrets: Secrets{"s3cr\"et: with: colons"},
				Tolerance: DefaultTolerance, MaxBody: DefaultMaxBody,
				HMAC:     HMAC{Header: "X-Shop-Signature", Prefix: "sha512=", Algorithm: "sha512", Encoding: "base64"},
				IDHeader: "X-Shop-Delivery", TypeHeader: "X-Shop-Topic",
			},
			{
				Name: "svix", Verify: "standard", Secrets: Secrets{testStandardSecret},
				Tolerance: DefaultTolerance, MaxBody: DefaultMaxBody,
				IDField: "data.event_id", TypeField: "data.kind",
			},
			{
				Name: "jobs", Verify: "none", Tolerance: DefaultTolerance, MaxBody: DefaultMaxBody,
				IDExpr: `body.job.id + ":" + body.status`, TypeExpr: `"job." + body.status`,
			},
		},
		API: API{Tokens: Secrets{"0123456789abcdef0123"}},
		Routes: []Route{{
			Name:             "billing",
			Sources:          []string{"stripe", "shop"},
			Events:           []string{"invoice.*", "customer.subscription.*"},
			Filter:           "!has(body.livemode) || body.livemode",
			URL:              "https://billing.internal:8443/hooks?src=hookgate",
			Proxy:            "http://hookgate:proxy-password@smokescreen.internal:4750",
			Secret:           testStandardSecret,
			Timeout:          5 * time.Second,
			Headers:          map[string]string{"Authorization": "Bearer abc123", "X-Team": "billing"},
			Concurrency:      2,
			Rate:             12.5,
			Retries:          0,
			RetryWaitMin:     100 * time.Millisecond,
			RetryWaitMax:     2 * time.Second,
			Schedule:         []time.Duration{30 * time.Second, 2 * time.Minute, 90 * time.Minute},
			BreakerThreshold: 5,
			BreakerCooldown:  time.Minute,
		}},
		Tasks: Tasks{
			Secret: testStandardSecret, Allow: []string{"10.0.0.0/8", "billing.internal"},
			KeyTTL: 48 * time.Hour, Timeout: 20 * time.Second, Proxy: "socks5://egress.internal:1080", Concurrency: 4, TokenConcurrency: 2, Retries: 1,
			RetryWaitMin: 200 * time.Millisecond, RetryWaitMax: 3 * time.Second,
			Schedule: []time.Duration{time.Minute, time.Hour}, MaxBody: 65536,
			Tokens: Secrets{"task-client-token-0123456789"},
		},
		Retention: Retention{Events: 240 * time.Hour, Attempts: 72 * time.Hour, Interval: 5 * time.Minute},
		Metrics:   Metrics{Token: "metrics-token-0123456789"},
		HTTP: HTTP{MaxConnections: 1000, ReadTimeout: 10 * time.Second, WriteTimeout: 15 * time.Second,
			IdleTimeout: time.Minute, BodyMemory: 32 << 20},
		Cluster: Cluster{Enabled: true, ClaimTTL: 72 * time.Hour, ClaimTimeout: 2 * time.Second, RecordsTTL: 96 * time.Hour, TakesTTL: 2 * time.Minute},
		Alerts: Alerts{URL: "https://hooks.slack.example/services/T0/B0/alerttoken0123456789", Secret: testStandardSecret,
			DeadLetterInterval: 15 * time.Minute, OutboxAge: 3 * time.Minute},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%#v\nwant\n%#v", got, want)
	}

	// Every key of Config must appear in the example at least once.
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	present := map[string]bool{}
	collectNodePaths(doc.Content[0], "", present)
	for _, p := range typePaths(reflect.TypeFor[Config](), "") {
		if !present[p] {
			t.Errorf("testdata/full.yaml does not set %s", p)
		}
	}
}

// typePaths lists the key paths of t, "[]" standing for any list index.
// A map counts as one key (any of its entries).
func typePaths(t reflect.Type, prefix string) []string {
	var out []string
	switch t.Kind() {
	case reflect.Struct:
		if t == reflect.TypeFor[time.Time]() {
			return []string{prefix}
		}
		for name, f := range yamlFields(t) {
			p := name
			if prefix != "" {
				p = prefix + "." + name
			}
			out = append(out, typePaths(f.Type, p)...)
		}
	case reflect.Slice:
		out = append(out, typePaths(t.Elem(), prefix+"[]")...)
	default:
		out = append(out, prefix)
	}
	return out
}

func collectNodePaths(n *yaml.Node, prefix string, present map[string]bool) {
	switch n.Kind {
	case yaml.MappingNode:
		if strings.HasSuffix(prefix, ".headers") {
			present[prefix] = true
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := n.Content[i].Value
			if prefix != "" {
				p = prefix + "." + p
			}
			collectNodePaths(n.Content[i+1], p, present)
		}
	case yaml.SequenceNode:
		for _, item := range n.Content {
			collectNodePaths(item, prefix+"[]", present)
		}
	default:
		present[prefix] = true
	}
}

func TestDefaults(t *testing.T) {
	c := mustParse(t, `
sources:
  - name: s-stripe
    verify: stripe
    secrets: [whsec_x]
  - name: s-standard
    verify: standard
    secrets: [`+testStandardSecret+`]
  - name: s-github
    verify: github
    secrets: [gh]
  - name: s-hmac
    verify: hmac
    secrets: [k]
    hmac: {header: X-Sig}
    id_field: data.id
  - name: s-none
    verify: none
    id_header: X-Id
  - name: s-override
    verify: stripe
    secrets: [whsec_x]
    id_header: X-Id
    type_header: X-Type
routes:
  - name: r
    sources: [s-stripe]
    url: http://localhost/x
`, nil)

	if c.Listen != "127.0.0.1:8080" || c.DataDir != "./data" || c.ShutdownTimeout != 20*time.Second {
		t.Errorf("top level: %q %q %v", c.Listen, c.DataDir, c.ShutdownTimeout)
	}
	if c.Log != (Log{Level: "info", Format: "text"}) {
		t.Errorf("log: %+v", c.Log)
	}
	wantNATS := NATS{
		StoreDir:        filepath.Join("./data", "jetstream"),
		SyncInterval:    time.Second,
		MemoryLimitMB:   DefaultMemoryLimitMB,
		Stream:          "HOOKGATE_EVENTS",
		DuplicateWindow: 20 * time.Second,
		Retention:       "interest",
		Replicas:        1,
		ConnectTimeout:  10 * time.Second,
		OutboxMaxAge:    time.Minute,
	}
	if c.NATS != wantNATS {
		t.Errorf("nats: %+v, want %+v", c.NATS, wantNATS)
	}
	if want := (Store{Path: filepath.Join("./data", "hookgate.db"), BatchMax: 512, Readers: 4, WALMaxMB: 1024}); c.Store != want {
		t.Errorf("store: %+v, want %+v", c.Store, want)
	}
	if c.API.Tokens != nil {
		t.Errorf("api.tokens: %q", c.API.Tokens)
	}

	type loc struct{ idH, idF, typeH, typeF string }
	wantLoc := map[string]loc{
		"s-stripe":   {idF: "id", typeF: "type"},
		"s-standard": {idH: "webhook-id", typeF: "type"},
		"s-github":   {idH: "X-GitHub-Delivery", typeH: "X-GitHub-Event"},
		"s-hmac":     {idF: "data.id"},
		"s-none":     {idH: "X-Id"},
		"s-override": {idH: "X-Id", typeH: "X-Type"},
	}
	for _, s := range c.Sources {
		if s.Tolerance != 5*time.Minute || s.MaxBody != 1048576 {
			t.Errorf("%s: tolerance %v max_body %d", s.Name, s.Tolerance, s.MaxBody)
		}
		if got := (loc{s.IDHeader, s.IDField, s.TypeHeader, s.TypeField}); got != wantLoc[s.Name] {
			t.Errorf("%s: id/type %+v, want %+v", s.Name, got, wantLoc[s.Name])
		}
		wantHMAC := HMAC{}
		if s.Verify == "hmac" {
			wantHMAC = HMAC{Header: "X-Sig", Algorithm: "sha256", Encoding: "hex"}
		}
		if s.HMAC != wantHMAC {
			t.Errorf("%s: hmac %+v, want %+v", s.Name, s.HMAC, wantHMAC)
		}
	}

	r := c.Routes[0]
	if r.Timeout != 15*time.Second || r.Concurrency != 8 || r.Retries != 2 || r.Rate != 0 || r.Secret != "" || r.Events != nil || r.Headers != nil {
		t.Errorf("route: %+v", r)
	}
	h := time.Hour
	wantSchedule := []time.Duration{time.Minute, 5 * time.Minute, 30 * time.Minute, h, 2 * h, 4 * h, 8 * h, 12 * h, 12 * h, 12 * h, 12 * h, 12 * h}
	if !slices.Equal(r.Schedule, wantSchedule) {
		t.Errorf("schedule %v, want %v", r.Schedule, wantSchedule)
	}
	var total time.Duration
	for _, d := range wantSchedule {
		total += d
	}
	if total < 70*h || total > 80*h { // "about 3 days"
		t.Errorf("default schedule totals %v", total)
	}
}

// tasks.token_concurrency's default is resolved at load, so check-config
// prints the value in force.
func TestTokenConcurrencyDefault(t *testing.T) {
	for _, tt := range []struct {
		tasks string
		want  int
	}{
		{"{}", 4},
		{"{concurrency: 10}", 2},
		{"{concurrency: 2}", 1},
		{"{concurrency: 10, token_concurrency: 0}", 2},
		{"{concurrency: 10, token_concurrency: 3}", 3},
	} {
		c := mustParse(t, "sources: [{name: a, verify: none, id_field: id}]\ntasks: "+tt.tasks+"\n", nil)
		if got := c.Tasks.TokenConcurrency; got != tt.want {
			t.Errorf("tasks: %s: token_concurrency %d, want %d", tt.tasks, got, tt.want)
		}
	}
}

func TestDefaultsDerivedFromDataDir(t *testing.T) {
	c := mustParse(t, "data_dir: /srv/hg\nsources: [{name: a, verify: none, id_field: id}]\n", nil)
	if c.NATS.StoreDir != "/srv/hg/jetstream" || c.Store.Path != "/srv/hg/hookgate.db" {
		t.Errorf("store_dir %q, store.path %q", c.NATS.StoreDir, c.Store.Path)
	}
}

func TestDefaultScheduleIsNotShared(t *testing.T) {
	c := mustParse(t, `
sources: [{name: a, verify: none, id_field: id}]
routes:
  - {name: r1, sources: [a], url: "http://x"}
  - {name: r2, sources: [a], url: "http://x"}
`, nil)
	c.Routes[0].Schedule[0] = time.Second
	if c.Routes[1].Schedule[0] != time.Minute || DefaultSchedule()[0] != time.Minute {
		t.Error("default schedule slice is shared")
	}
}

// Explicit zero values are kept, not replaced by defaults.
func TestExplicitZero(t *testing.T) {
	c := mustParse(t, `
sources: [{name: a, verify: none, id_field: id}]
routes:
  - {name: r, sources: [a], url: "http://x", retries: 0, rate: 0}
`, nil)
	if c.Routes[0].Retries != 0 {
		t.Errorf("retries: 0 became %d", c.Routes[0].Retries)
	}
	// Null means absent: the default applies.
	c = mustParse(t, `
sources: [{name: a, verify: none, id_field: id}]
routes:
  - {name: r, sources: [a], url: "http://x", retries: ~, timeout: null, schedule: }
`, nil)
	if r := c.Routes[0]; r.Retries != 2 || r.Timeout != 15*time.Second || len(r.Schedule) != 12 {
		t.Errorf("null values: %+v", r)
	}
	err := parseErr(t, `
shutdown_timeout: 0s
sources: [{name: a, verify: none, id_field: id}]
routes:
  - {name: r, sources: [a], url: "http://x", timeout: 0s, concurrency: 0, schedule: []}
`, nil)
	wantError(t, err, "config: shutdown_timeout: must be positive, got 0s")
	wantError(t, err, "config: routes[0].timeout: must be positive, got 0s")
	wantError(t, err, "config: routes[0].concurrency: must be positive, got 0")
	wantErrorMatch(t, err, `^config: routes\[0\]\.schedule: must not be empty`)
}

func TestDurations(t *testing.T) {
	c := mustParse(t, `
shutdown_timeout: 1m30s
nats: {sync_interval: "250ms", duplicate_window: 1h}
sources: [{name: a, verify: none, id_field: id}]
routes:
  - name: r
    sources: [a]
    url: "http://x"
    timeout: 2s
    schedule:
      - 1s
      - "2m"
      - 1h30m
`, nil)
	if c.ShutdownTimeout != 90*time.Second || c.NATS.SyncInterval != 250*time.Millisecond || c.NATS.DuplicateWindow != time.Hour {
		t.Errorf("durations: %v %v %v", c.ShutdownTimeout, c.NATS.SyncInterval, c.NATS.DuplicateWindow)
	}
	if want := []time.Duration{time.Second, 2 * time.Minute, 90 * time.Minute}; !slices.Equal(c.Routes[0].Schedule, want) {
		t.Errorf("schedule %v, want %v", c.Routes[0].Schedule, want)
	}
}

func TestEnvExpansion(t *testing.T) {
	vars := map[string]string{
		"STRIPE_WEBHOOK_SECRET": `whsec_"quoted": value, [not] {a: list}` + "\nsecond: line",
		"PORT":                  "4222",
		"LISTEN":                "0.0.0.0:1234",
		"EMPTY":                 "",
		"TOKEN":                 "tok-0123456789abcdef",
		"HDR":                   "v1",
	}
	c := mustParse(t, `
listen: ${LISTEN}
nats:
  port: "${PORT}"           # quoted, still a number
  connect_timeout: ${EMPTY} # empty: default
sources:
  - name: stripe
    verify: stripe
    secrets:
      - ${STRIPE_WEBHOOK_SECRET}
      - pre-${STRIPE_WEBHOOK_SECRET}-post
    id_field: id
api:
  tokens: ["${TOKEN}"]
routes:
  - name: r
    sources: [stripe]
    url: "http://example.com/$${NOT_EXPANDED}/$HOME/a$$b/cost$"
    headers:
      X-Hdr: "${HDR}"
`, vars)
	if c.Listen != "0.0.0.0:1234" {
		t.Errorf("listen %q", c.Listen)
	}
	if c.NATS.Port != 4222 || c.NATS.ConnectTimeout != 10*time.Second {
		t.Errorf("nats port %d connect_timeout %v", c.NATS.Port, c.NATS.ConnectTimeout)
	}
	s := vars["STRIPE_WEBHOOK_SECRET"]
	if want := []string{s, "pre-" + s + "-post"}; !slices.Equal(c.Sources[0].Secrets.Reveal(), want) {
		t.Errorf("secrets %q, want %q", c.Sources[0].Secrets, want)
	}
	if len(c.Sources) != 1 || c.Sources[0].IDField != "id" {
		t.Errorf("a secret changed the structure: %+v", c.Sources)
	}
	if c.API.Tokens[0] != "tok-0123456789abcdef" {
		t.Errorf("token %q", c.API.Tokens[0])
	}
	if want := "http://example.com/${NOT_EXPANDED}/$HOME/a$$b/cost$"; c.Routes[0].URL.Reveal() != want {
		t.Errorf("url %q, want %q", c.Routes[0].URL, want)
	}
	if want := (Headers{"X-Hdr": "v1"}); !reflect.DeepEqual(c.Routes[0].Headers, want) {
		t.Errorf("headers %q", c.Routes[0].Headers)
	}
}

// Keys are never expanded: a header key keeps "${HDR}" and, '{' not being
// a token character, is refused.
func TestEnvKeysNotExpanded(t *testing.T) {
	err := parseErr(t, `
sources: [{name: a, verify: none, id_field: id}]
routes:
  - name: r
    sources: [a]
    url: http://x
    headers: {"X-${HDR}": v}
`, map[string]string{"HDR": "A"})
	wantError(t, err, `config: routes[0].headers["X-${HDR}"]: invalid header name`)
}

func TestEnvUnset(t *testing.T) {
	err := parseErr(t, `
sources:
  - name: stripe
    verify: stripe
    secrets:
      - ${STRIPE_WEBHOOK_SECRET}
routes:
  - name: r
    sources: [stripe]
    url: ${DOWNSTREAM_URL}/hooks
`, nil)
	wantError(t, err, "config: sources[0].secrets[0]: environment variable STRIPE_WEBHOOK_SECRET is not set")
	wantError(t, err, "config: routes[0].url: environment variable DOWNSTREAM_URL is not set")
}

func TestEnvInvalidReference(t *testing.T) {
	for _, v := range []string{"${", "abc${NAME", "${}", "${1X}", "${A-B}", "${A:-default}"} {
		err := parseErr(t, "sources: [{name: a, verify: hmac, secrets: ['"+v+"'], hmac: {header: X}, id_field: id}]\n", map[string]string{"A": "x", "NAME": "x"})
		wantErrorMatch(t, err, `^config: sources\[0\]\.secrets\[0\]: (unterminated|invalid environment variable reference)`)
		if len(v) > 2 && strings.Contains(err.Error(), v) {
			t.Errorf("error echoes the value %q: %v", v, err)
		}
	}
}

// An anchored value reached again through an alias is expanded once:
// "$${X}" must give "${X}", not an unset-variable error.
func TestEnvAliasExpandedOnce(t *testing.T) {
	c := mustParse(t, `
sources:
  - {name: a, verify: hmac, secrets: [&s "$${X}-${Y}"], hmac: {header: X-S}, id_field: id}
  - {name: b, verify: hmac, secrets: [*s], hmac: {header: X-S}, id_field: id}
`, map[string]string{"Y": "y"})
	for _, s := range c.Sources {
		if s.Secrets[0] != "${X}-y" {
			t.Errorf("%s: secret %q", s.Name, s.Secrets[0])
		}
	}
}

func TestExpand(t *testing.T) {
	lookup := env(map[string]string{"A": "1", "B_2": "two", "E": ""})
	for in, want := range map[string]string{
		"":             "",
		"plain":        "plain",
		"${A}":         "1",
		"x${A}y${B_2}": "x1ytwo",
		"${E}":         "",
		"$":            "$",
		"$$":           "$$",
		"$A":           "$A",
		"$${A}":        "${A}",
		"$$${A}":       "$${A}",
		"a$$b$":        "a$$b$",
		"$}{":          "$}{",
	} {
		got, _, err := expand(in, lookup)
		if err != nil || got != want {
			t.Errorf("expand(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestUnknownKeys(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"top level", "listn: x\nsources: [{name: a, verify: none, id_field: id}]\n", "config: listn: unknown key"},
		{"nested", "nats: {strem: X}\nsources: [{name: a, verify: none, id_field: id}]\n", "config: nats.strem: unknown key"},
		{"list item", `
sources:
  - {name: a, verify: none, id_field: id}
  - name: b
    verfy: none
`, "config: sources[1].verfy: unknown key"},
		{"deep", "sources: [{name: a, verify: hmac, secrets: [k], id_field: id, hmac: {header: X, algo: sha1}}]\n", "config: sources[0].hmac.algo: unknown key"},
		{"odd key", "sources: [{name: a, verify: none, id_field: id}]\n\"a b\": 1\n", `config: ["a b"]: unknown key`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, parseErr(t, tc.src, nil), tc.want)
		})
	}
}

func TestTypeErrors(t *testing.T) {
	const src = `sources: [{name: a, verify: none, id_field: id}]
routes:
  - name: r
    sources: [a]
    url: http://x
    timeout: banana
    schedule: [1m, 30, soon]
    concurrency: many
    rate: fast
    headers: [a, b]
nats:
  port: abc
  sync_always: maybe
log: debug
api:
  tokens: "single-token-value"
listen: !!binary "not-base64-secret"
`
	err := parseErr(t, src, nil)
	for _, want := range []string{
		`config: routes[0].timeout: line 6: cannot use "banana" as a duration (a Go duration such as "15s", "5m" or "1h30m")`,
		`config: routes[0].schedule[1]: line 7: cannot use "30" as a duration (a duration needs a unit, e.g. 30s)`,
		`config: routes[0].schedule[2]: line 7: cannot use "soon" as a duration (a Go duration such as "15s", "5m" or "1h30m")`,
		`config: routes[0].concurrency: line 8: cannot use "many" as an integer`,
		`config: routes[0].rate: line 9: cannot use "fast" as a number`,
		`config: routes[0].headers: line 10: expected a mapping, got a list`,
		`config: nats.port: line 12: cannot use "abc" as an integer`,
		`config: nats.sync_always: line 13: cannot use "maybe" as a boolean (true or false)`,
		`config: log: line 14: expected a mapping, got a single value`,
		`config: api.tokens: line 16: expected a list, got a single value`,
		`config: listen: line 17: the !!binary value is not base64`,
	} {
		wantError(t, err, want)
	}
	if strings.Contains(err.Error(), "single-token-value") || strings.Contains(err.Error(), "not-base64-secret") {
		t.Errorf("error echoes a string value: %v", err)
	}
}

func TestStructureErrors(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"duplicate key", "listen: a:1\nlisten: b:2\n", "config: listen: line 2: duplicate key (first at line 1)"},
		{"not a mapping", "- a\n- b\n", "config: line 1: the document must be a mapping of keys, got a list"},
		{"two documents", "sources: []\n---\nsources: []\n", "config: line 2: more than one YAML document"},
		{"two documents after an empty one", "sources: []\n---\n---\nlisten: x\n", "config: line 3: more than one YAML document"},
		{"syntax", "sources: [\n", ""},
		{"unquoted reference in flow list", "sources: [{name: a, verify: stripe, secrets: [${X}]}]\n", `config: yaml: did not find expected ',' or ']'; note: inside [...] or {...} quote a ${NAME} reference: ["${NAME}"]`},
		{"mapping as a key", "? {a: 1}\n: x\n", "config: line 1: a key must be a plain value, got a mapping"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := parseErr(t, tc.src, nil)
			if !strings.HasPrefix(err.Error(), "config: ") {
				t.Errorf("error %q lacks the config: prefix", err)
			}
			if tc.want != "" {
				wantError(t, err, tc.want)
			}
		})
	}
}

func TestTrailingEmptyDocument(t *testing.T) {
	mustParse(t, "sources: [{name: a, verify: none, id_field: id}]\n---\n# nothing\n", nil)
}

func TestEmptyDocument(t *testing.T) {
	for _, src := range []string{"", "# only a comment\n", "~\n"} {
		err := parseErr(t, src, nil)
		if err.Error() != "config: sources: nothing to serve: add a source, or tasks.tokens (or api.tokens) for a gateway that only forwards tasks" {
			t.Errorf("%q: %v", src, err)
		}
	}
}

// Anchors and merge keys are plain YAML and work, unknown keys included.
func TestMergeKeys(t *testing.T) {
	c := mustParse(t, `
sources: [{name: a, verify: none, id_field: id}]
routes:
  - &base
    name: r1
    sources: [a]
    url: http://x
    retries: 0
    headers: &h {X-A: "1"}
  - <<: *base
    name: r2
    headers:
      <<: *h
      X-B: "2"
`, nil)
	r2 := c.Routes[1]
	if r2.Name != "r2" || r2.URL != "http://x" || r2.Retries != 0 || !reflect.DeepEqual(r2.Headers, Headers{"X-A": "1", "X-B": "2"}) {
		t.Errorf("r2 = %+v", r2)
	}
	err := parseErr(t, `
x: &x {name: a, verify: none, id_field: id, bogus: 1}
`, nil)
	wantError(t, err, "config: x: unknown key")

	err = parseErr(t, `
sources:
  - &s {name: a, verify: none, id_field: id}
  - <<: *s
    name: b
    extra: 1
`, nil)
	wantError(t, err, "config: sources[1].extra: unknown key")
}

func TestManyAliases(t *testing.T) {
	// "Billion laughs" documents must fail fast, not hang: through lists
	// of aliases, and through merges.
	var lists strings.Builder
	lists.WriteString("sources: [{name: a, verify: none, id_field: id}]\ne: &e [" + strings.Repeat("x, ", 500) + "x]\n")
	lists.WriteString("r: &r {name: r, sources: [a], url: 'http://x', events: *e}\n")
	lists.WriteString("routes: [" + strings.Repeat("*r, ", 600) + "*r]\n")

	var merges strings.Builder
	merges.WriteString("sources: [{name: a, verify: none, id_field: id}]\nh0: &h0 {X-A: x}\n")
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&merges, "h%d: &h%d {<<: [%s*h%d]}\n", i, i, strings.Repeat(fmt.Sprintf("*h%d, ", i-1), 9), i-1)
	}
	merges.WriteString("routes: [{name: r, sources: [a], url: 'http://x', headers: *h9}]\n")

	for name, src := range map[string]string{"lists": lists.String(), "merges": merges.String()} {
		start := time.Now()
		_, err := Parse([]byte(src), env(nil))
		wantErrorMatch(t, err, `document too large or too deeply nested`)
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s: took %v", name, d)
		}
	}
}

func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hookgate.yaml")
	src := "sources:\n  - name: gh\n    verify: github\n    secrets: [\"${HOOKGATE_TEST_GH_SECRET}\"]\n"
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOOKGATE_TEST_GH_SECRET", "it's: a \"secret\"")
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := c.Source("gh")
	if !ok || s.Secrets[0] != "it's: a \"secret\"" || s.IDHeader != "X-GitHub-Delivery" {
		t.Errorf("Source(gh) = %+v, %v", s, ok)
	}
	s.Name = "changed"
	if c.Sources[0].Name != "changed" {
		t.Error("Source does not point into Sources")
	}
	if _, ok := c.Source("missing"); ok {
		t.Error("Source(missing) found")
	}

	_, err = Load(filepath.Join(t.TempDir(), "missing.yaml"))
	if err == nil || !errors.Is(err, os.ErrNotExist) || !strings.HasPrefix(err.Error(), "config: ") {
		t.Errorf("Load(missing) = %v", err)
	}
}

func TestErrorType(t *testing.T) {
	err := parseErr(t, "sources: [{name: a, verify: foo}]\n", nil)
	var e *Error
	if !errors.As(err, &e) || e.Path != "sources[0].verify" || !strings.HasPrefix(e.Msg, `unknown scheme "foo"`) {
		t.Errorf("errors.As: %#v", e)
	}
}

// The repository's own config.yaml, if there is one, must parse. Variables
// it references that are not set get a placeholder that passes for any
// secret or token.
func TestRepoConfig(t *testing.T) {
	path := filepath.Join("..", "config.yaml")
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		t.Skip("no config.yaml at the repository root")
	}
	if err != nil {
		t.Fatal(err)
	}
	_, err = Parse(data, func(name string) (string, bool) {
		if v, ok := os.LookupEnv(name); ok {
			return v, true
		}
		t.Logf("%s: ${%s} not set, using a placeholder", path, name)
		return testStandardSecret, true
	})
	if err != nil {
		t.Errorf("%s: %v", path, err)
	}
}
