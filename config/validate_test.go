package config

import (
	"strings"
	"testing"

	"github.com/hookgate/hookgate/signature"
)

// validBase is a valid configuration that the cases below extend.
const validBase = `
sources:
  - name: stripe
    verify: stripe
    secrets: [whsec_x]
`

func TestValidBases(t *testing.T) {
	mustParse(t, validBase, nil)
	mustParse(t, validBase+"routes: [{name: r, sources: [stripe], url: 'https://example.com/hook'}]\n", nil)
}

func TestValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
		want string // a line of the error: exactly, or its prefix if it ends in "…"
	}{
		// Top level, log, nats, store.
		{"listen no port", "listen: localhost\n" + validBase, "config: listen: must be host:port…"},
		{"listen bad port", "listen: ':http'\n" + validBase, "config: listen: must be host:port…"},
		{"listen port range", "listen: ':70000'\n" + validBase, "config: listen: must be host:port…"},
		{"shutdown_timeout negative", "shutdown_timeout: -1s\n" + validBase, "config: shutdown_timeout: must be positive, got -1s"},
		{"log level", "log: {level: verbose}\n" + validBase, `config: log.level: unknown level "verbose" (want debug, info, warn or error)`},
		{"log level case", "log: {level: INFO}\n" + validBase, `config: log.level: unknown level "INFO"…`},
		{"log format", "log: {format: xml}\n" + validBase, `config: log.format: unknown format "xml" (want text or json)`},
		{"nats port high", "nats: {port: 65536}\n" + validBase, "config: nats.port: must be between 0 and 65535, got 65536"},
		{"nats port negative", "nats: {port: -1}\n" + validBase, "config: nats.port: must be between 0 and 65535, got -1"},
		{"nats url", "nats: {url: 'nats://a:4222,,nats://b:4222'}\n" + validBase, "config: nats.url: empty server in comma-separated list"},
		{"nats url port", "nats: {url: 'nats://s3cretTokenABCDEFGH@127.0.0.1:42x22'}\n" + validBase, "config: nats.url[0]: not a valid URL (want nats://host:port, tls://, ws://, wss:// or host:port)"},
		{"nats url bare bad port", "nats: {url: 'nats://a:4222,user:pass@b:42x22'}\n" + validBase, "config: nats.url[1]: not a valid URL (want nats://host:port, tls://, ws://, wss:// or host:port)"},
		{"nats url scheme", "nats: {url: 'http://h:4222'}\n" + validBase, `config: nats.url[0]: unknown scheme "http" (want nats, tls, ws or wss)`},
		{"nats url port range", "nats: {url: 'nats://a:4222,nats://b:99999'}\n" + validBase, "config: nats.url[1]: port must be between 1 and 65535"},
		{"nats url port zero", "nats: {url: 'tls://b:0'}\n" + validBase, "config: nats.url[0]: port must be between 1 and 65535"},
		{"nats url mixes ws", "nats: {url: 'nats://a:4222,ws://b:8080'}\n" + validBase, "config: nats.url[1]: cannot mix ws:// or wss:// servers with nats:// or tls:// ones"},
		{"nats url bare then ws", "nats: {url: 'a:4222,wss://b'}\n" + validBase, "config: nats.url[1]: cannot mix ws:// or wss:// servers with nats:// or tls:// ones"},
		{"nats sync_interval", "nats: {sync_interval: -5s}\n" + validBase, "config: nats.sync_interval: must be positive, got -5s"},
		{"nats memory_limit_mb", "nats: {memory_limit_mb: -1}\n" + validBase, "config: nats.memory_limit_mb: must be 0 (none) or more, got -1"},
		{"nats stream", "nats: {stream: a.b}\n" + validBase, `config: nats.stream: invalid stream name "a.b"…`},
		{"nats stream too long", "nats: {stream: " + strings.Repeat("S", 201) + "}\n" + validBase, `config: nats.stream: must be at most 200 bytes…`},
		{"nats duplicate_window", "nats: {duplicate_window: 0s}\n" + validBase, "config: nats.duplicate_window: must be positive, got 0s"},
		{"nats replicas", "nats: {replicas: 0}\n" + validBase, "config: nats.replicas: must be positive, got 0"},
		{"nats replicas embedded", "nats: {replicas: 3}\n" + validBase, "config: nats.replicas: must be 1 with the embedded server (no nats.url), got 3: replicas need an external NATS cluster"},
		{"nats replicas high", "nats: {url: 'nats://a:4222', replicas: 7}\n" + validBase, "config: nats.replicas: must be at most 5 (JetStream's limit), got 7"},
		{"nats connect_timeout", "nats: {connect_timeout: -1m}\n" + validBase, "config: nats.connect_timeout: must be positive, got -1m0s"},
		{"nats outbox_max_age", "nats: {outbox_max_age: 0s}\n" + validBase, "config: nats.outbox_max_age: must be positive, got 0s"},
		{"store batch_max", "store: {batch_max: 0}\n" + validBase, "config: store.batch_max: must be positive, got 0"},
		{"store batch_max huge", "store: {batch_max: 2305843009213693952}\n" + validBase, "config: store.batch_max: must be at most 65536, got 2305843009213693952"},
		{"store batch_max high", "store: {batch_max: 1000000000}\n" + validBase, "config: store.batch_max: must be at most 65536, got 1000000000"},
		{"store wal_max_mb high", "store: {wal_max_mb: 36028797018963968}\n" + validBase, "config: store.wal_max_mb: must be at most 1048576, got 36028797018963968"},
		{"nats memory_limit_mb wraps", "nats: {memory_limit_mb: 17592186044417}\n" + validBase, "config: nats.memory_limit_mb: must be at most 1073741824 (1 PiB), got 17592186044417"},
		{"store readers", "store: {readers: -2}\n" + validBase, "config: store.readers: must be positive, got -2"},
		{"store wal_max_mb", "store: {wal_max_mb: 0}\n" + validBase, "config: store.wal_max_mb: must be positive, got 0"},
		{"http max_connections", "http: {max_connections: 0}\n" + validBase, "config: http.max_connections: must be positive, got 0"},
		{"http read_timeout", "http: {read_timeout: 0s}\n" + validBase, "config: http.read_timeout: must be positive, got 0s"},
		{"http write_timeout", "http: {write_timeout: -1s}\n" + validBase, "config: http.write_timeout: must be positive, got -1s"},
		{"http idle_timeout", "http: {idle_timeout: 0s}\n" + validBase, "config: http.idle_timeout: must be positive, got 0s"},
		{"http body_memory", "http: {body_memory: 0}\n" + validBase, "config: http.body_memory: must be positive, got 0"},
		{"http body_memory below max_body", "http: {body_memory: 1500000}\nsources: [{name: s, verify: none, id_field: id, max_body: 2000000}]\n", "config: http.body_memory: must be at least sources[0].max_body (2000000), got 1500000"},
		{"http body_memory below tasks", "http: {body_memory: 2000000}\ntasks: {max_body: 3000000}\n" + validBase, "config: http.body_memory: must be at least tasks.max_body (3000000), got 2000000"},

		// Alerts.
		{"alerts url without secret", "alerts: {url: 'https://hooks.example.com/x'}\n" + validBase, "config: alerts.secret: required with alerts.url"},
		{"alerts secret without url", "alerts: {secret: '" + testStandardSecret + "'}\n" + validBase, "config: alerts.url: required with alerts.secret"},
		{"alerts url scheme", "alerts: {url: 'ftp://x/y', secret: '" + testStandardSecret + "'}\n" + validBase, "config: alerts.url: must be an absolute http:// or https:// URL with a host"},
		{"alerts secret invalid", "alerts: {url: 'https://x/y', secret: 'whsec_nope'}\n" + validBase, "config: alerts.secret: invalid standard webhooks secret…"},
		{"alerts dead_letter_interval", "alerts: {dead_letter_interval: 0s}\n" + validBase, "config: alerts.dead_letter_interval: must be positive, got 0s"},
		{"alerts outbox_age", "alerts: {outbox_age: -1s}\n" + validBase, "config: alerts.outbox_age: must be positive, got -1s"},

		// Sources.
		{"no sources", "sources: []\n", "config: sources: nothing to serve: add a source, or tasks.tokens (or api.tokens) for a gateway that only forwards tasks"},
		{"no sources key", "listen: ':8080'\n", "config: sources: nothing to serve: add a source, or tasks.tokens (or api.tokens) for a gateway that only forwards tasks"},
		{"source name missing", "sources: [{verify: none, id_field: id}]\n", "config: sources[0].name: required"},
		{"source name pattern", "sources: [{name: Stripe, verify: none, id_field: id}]\n", `config: sources[0].name: invalid name "Stripe"…`},
		{"source name leading dash", "sources: [{name: -a, verify: none, id_field: id}]\n", `config: sources[0].name: invalid name "-a"…`},
		{"source name too long", "sources: [{name: " + strings.Repeat("a", 65) + ", verify: none, id_field: id}]\n", `config: sources[0].name: invalid name…`},
		{"source name duplicate", validBase + "  - {name: gh, verify: github, secrets: [s]}\n  - {name: stripe, verify: github, secrets: [s]}\n", `config: sources[2].name: duplicate source "stripe"`},
		{"verify missing", "sources: [{name: a, secrets: [s]}]\n", "config: sources[0].verify: required (…"},
		{"verify unknown", "sources: [{name: a, verify: foo, secrets: [s]}]\n", `config: sources[0].verify: unknown scheme "foo"…`},
		{"secrets missing", "sources: [{name: a, verify: stripe}]\n", "config: sources[0].secrets: required for verify: stripe"},
		{"secrets empty list", "sources: [{name: a, verify: github, secrets: []}]\n", "config: sources[0].secrets: required for verify: github"},
		{"secret empty", "sources: [{name: a, verify: stripe, secrets: [whsec_x, '']}]\n", "config: sources[0].secrets[1]: empty secret"},
		{"secret null", "sources: [{name: a, verify: stripe, secrets: [whsec_x, ~]}]\n", "config: sources[0].secrets[1]: line 1: empty list item"},
		{"source null", "sources: [~]\n", "config: sources[0]: line 1: empty list item"},
		{"secret whitespace", "sources: [{name: a, verify: stripe, secrets: [\"whsec_x\\n\"]}]\n", "config: sources[0].secrets[0]: has leading or trailing whitespace"},
		{"secrets with none", "sources: [{name: a, verify: none, secrets: [s], id_field: id}]\n", "config: sources[0].secrets: not used with verify: none"},
		{"standard secret", "sources: [{name: a, verify: standard, secrets: [" + testStandardSecret + ", whsec_!!]}]\n", "config: sources[0].secrets[1]: invalid standard webhooks secret: secret is not whsec_<base64>"},
		{"standard secret short", "sources: [{name: a, verify: standard, secrets: [whsec_YWJj]}]\n", "config: sources[0].secrets[0]: invalid standard webhooks secret: secret key shorter than 16 bytes"},
		{"standard private key", "sources: [{name: a, verify: standard, secrets: [whsk_AAAA]}]\n", "config: sources[0].secrets[0]: invalid standard webhooks secret: a whsk_ key is the sender's private key: configure its whpk_ public key"},
		{"standard public key short", "sources: [{name: a, verify: standard, secrets: [whpk_AAAA]}]\n", "config: sources[0].secrets[0]: invalid standard webhooks secret: public key is not whpk_ and the base64 of 32 bytes"},
		{"svix secret", "sources: [{name: a, verify: svix, secrets: [whsec_!!]}]\n", "config: sources[0].secrets[0]: invalid svix secret: secret is not whsec_<base64>"},
		{"tolerance", "sources: [{name: a, verify: stripe, secrets: [s], tolerance: 0s}]\n", "config: sources[0].tolerance: must be positive, got 0s"},
		{"max_body", "sources: [{name: a, verify: stripe, secrets: [s], max_body: -1}]\n", "config: sources[0].max_body: must be positive, got -1"},
		{"hmac header missing", "sources: [{name: a, verify: hmac, secrets: [s], id_field: id}]\n", "config: sources[0].hmac.header: required for verify: hmac"},
		{"hmac header invalid", "sources: [{name: a, verify: hmac, secrets: [s], id_field: id, hmac: {header: 'X Sig'}}]\n", `config: sources[0].hmac.header: invalid header name "X Sig"`},
		{"hmac algorithm", "sources: [{name: a, verify: hmac, secrets: [s], id_field: id, hmac: {header: X, algorithm: md5}}]\n", `config: sources[0].hmac.algorithm: unknown algorithm "md5" (want sha256 or sha512)`},
		{"hmac encoding", "sources: [{name: a, verify: hmac, secrets: [s], id_field: id, hmac: {header: X, encoding: base32}}]\n", `config: sources[0].hmac.encoding: unknown encoding "base32" (want hex or base64)`},
		{"hmac on stripe", "sources: [{name: a, verify: stripe, secrets: [s], hmac: {header: X}}]\n", "config: sources[0].hmac: only allowed with verify: hmac"},
		{"hmac empty block on github", "sources: [{name: a, verify: github, secrets: [s], hmac: {}}]\n", "config: sources[0].hmac: only allowed with verify: hmac"},
		{"hmac needs id", "sources: [{name: a, verify: hmac, secrets: [s], hmac: {header: X}}]\n", "config: sources[0]: one of id_header or id_field is required for verify: hmac"},
		{"none needs id", "sources: [{name: a, verify: none}]\n", "config: sources[0]: one of id_header or id_field is required for verify: none"},
		{"id exclusive", "sources: [{name: a, verify: stripe, secrets: [s], id_header: X-Id, id_field: id}]\n", "config: sources[0]: id_header and id_field are mutually exclusive"},
		{"type exclusive", "sources: [{name: a, verify: github, secrets: [s], type_header: X-T, type_field: type}]\n", "config: sources[0]: type_header and type_field are mutually exclusive"},
		{"id field empty segment", "sources: [{name: a, verify: none, id_field: data..id}]\n", `config: sources[0].id_field: invalid field path "data..id"…`},
		{"id field leading dot", "sources: [{name: a, verify: none, id_field: .id}]\n", `config: sources[0].id_field: invalid field path ".id"…`},
		{"type field trailing dot", "sources: [{name: a, verify: none, id_field: id, type_field: 'data.'}]\n", `config: sources[0].type_field: invalid field path "data."…`},
		{"id header invalid", "sources: [{name: a, verify: none, id_header: 'X Id'}]\n", `config: sources[0].id_header: invalid header name "X Id"`},
		{"type header invalid", "sources: [{name: a, verify: none, id_field: id, type_header: 'X:T'}]\n", `config: sources[0].type_header: invalid header name "X:T"`},

		// API.
		{"token empty", validBase + "api: {tokens: ['']}\n", "config: api.tokens[0]: empty token"},
		{"token short", validBase + "api: {tokens: [0123456789abcdef, short]}\n", "config: api.tokens[1]: too short: a token must be at least 16 characters"},
		{"token space", validBase + "api: {tokens: ['0123456789 abcdef']}\n", "config: api.tokens[0]: must not contain spaces or control characters"},
		{"task token short", validBase + "tasks: {tokens: [short]}\n", "config: tasks.tokens[0]: too short: a token must be at least 16 characters"},
		{"task token space", validBase + "tasks: {tokens: ['0123456789 abcdef']}\n", "config: tasks.tokens[0]: must not contain spaces or control characters"},
		{"task token also operator", validBase + "api: {tokens: [0123456789abcdef]}\ntasks: {tokens: [fedcba9876543210, 0123456789abcdef]}\n",
			"config: tasks.tokens[1]: also in api.tokens: a token is an operator's or a task client's, not both"},

		// Routes.
		{"route name missing", validBase + "routes: [{sources: [stripe], url: 'http://x'}]\n", "config: routes[0].name: required"},
		{"route name pattern", validBase + "routes: [{name: 'a b', sources: [stripe], url: 'http://x'}]\n", `config: routes[0].name: invalid name "a b"…`},
		{"route name duplicate", validBase + "routes: [{name: r, sources: [stripe], url: 'http://x'}, {name: r, sources: [stripe], url: 'http://x'}]\n", `config: routes[1].name: duplicate route "r"`},
		{"route sources missing", validBase + "routes: [{name: r, url: 'http://x'}]\n", "config: routes[0].sources: at least one source is required"},
		{"route source unknown", validBase + "routes: [{name: r, sources: [stripe, strpe], url: 'http://x'}]\n", `config: routes[0].sources[1]: unknown source "strpe"`},
		{"route source twice", validBase + "routes: [{name: r, sources: [stripe, stripe], url: 'http://x'}]\n", `config: routes[0].sources[1]: source "stripe" listed twice`},
		{"route source empty", validBase + "routes: [{name: r, sources: [''], url: 'http://x'}]\n", `config: routes[0].sources[0]: empty source name`},
		{"url missing", validBase + "routes: [{name: r, sources: [stripe]}]\n", "config: routes[0].url: required"},
		{"url scheme", validBase + "routes: [{name: r, sources: [stripe], url: 'ftp://example.com/x'}]\n", "config: routes[0].url: must be an absolute http:// or https:// URL with a host"},
		{"url relative", validBase + "routes: [{name: r, sources: [stripe], url: /hook}]\n", "config: routes[0].url: must be an absolute http:// or https:// URL with a host"},
		{"url no host", validBase + "routes: [{name: r, sources: [stripe], url: 'http:///hook'}]\n", "config: routes[0].url: must be an absolute http:// or https:// URL with a host"},
		{"url port only", validBase + "routes: [{name: r, sources: [stripe], url: 'http://:80/hook'}]\n", "config: routes[0].url: must be an absolute http:// or https:// URL with a host"},
		{"proxy scheme", validBase + "routes: [{name: r, sources: [stripe], url: 'http://h/x', proxy: 'ftp://u:s3cret@p:21'}]\n", "config: routes[0].proxy: scheme must be http, https, socks5 or socks5h"},
		{"proxy no host", validBase + "routes: [{name: r, sources: [stripe], url: 'http://h/x', proxy: 'http://:3128'}]\n", "config: routes[0].proxy: missing host"},
		{"proxy path", validBase + "routes: [{name: r, sources: [stripe], url: 'http://h/x', proxy: 'http://u:s3cret@p:3128/x?y'}]\n", "config: routes[0].proxy: a proxy URL has no path, query or fragment"},
		{"proxy invalid", validBase + "routes: [{name: r, sources: [stripe], url: 'http://h/x', proxy: 'http://u:s3cret@p:31x28'}]\n", "config: routes[0].proxy: not a valid URL"},
		{"tasks proxy", validBase + "tasks: {proxy: 'socks4://p:1080'}\n", "config: tasks.proxy: scheme must be http, https, socks5 or socks5h"},
		{"url unparsable", validBase + "routes: [{name: r, sources: [stripe], url: 'http://[::1/x'}]\n", "config: routes[0].url: must be an absolute http:// or https:// URL with a host"},
		{"event empty", validBase + "routes: [{name: r, sources: [stripe], url: 'http://x', events: ['a.*', '']}]\n", "config: routes[0].events[1]: empty pattern"},
		{"event control", validBase + "routes: [{name: r, sources: [stripe], url: 'http://x', events: [\"a\\tb\"]}]\n", "config: routes[0].events[0]: pattern must be printable characters"},
		{"route secret", validBase + "routes: [{name: r, sources: [stripe], url: 'http://x', secret: nope!}]\n", "config: routes[0].secret: invalid standard webhooks secret: secret is not whsec_<base64>"},
		{"tasks allow", validBase + "tasks: {allow: [10.0.0.0/8, '10.0.0.0/33']}\n", `config: tasks.allow[1]: "10.0.0.0/33" is not a host, IP or CIDR`},
		{"tasks secret", validBase + "tasks: {secret: nope!}\n", "config: tasks.secret: invalid standard webhooks secret: secret is not whsec_<base64>"},
		{"tasks key ttl", validBase + "tasks: {key_ttl: 0s}\n", "config: tasks.key_ttl: must be positive, got 0s"},
		{"tasks concurrency high", validBase + "tasks: {concurrency: 10001}\n", "config: tasks.concurrency: must be at most 10000, got 10001"},
		{"tasks concurrency zero", validBase + "tasks: {concurrency: 0}\n", "config: tasks.concurrency: must be positive, got 0"},
		{"tasks token concurrency high", validBase + "tasks: {token_concurrency: 1000000000}\n", "config: tasks.token_concurrency: must be at most 10000, got 1000000000"},
		{"tasks token concurrency", validBase + "tasks: {token_concurrency: -1}\n", "config: tasks.token_concurrency: must be 0 (a quarter of tasks.concurrency) or more, got -1"},
		{"tasks retry waits", validBase + "tasks: {retry_wait_min: 1m}\n", "config: tasks.retry_wait_min: must not exceed retry_wait_max (30s)"},
		{"route retry waits", validBase + "routes: [{name: r, sources: [stripe], url: 'http://x', retry_wait_min: 2s, retry_wait_max: 1s}]\n", "config: routes[0].retry_wait_min: must not exceed retry_wait_max (1s)"},
		{"retention", validBase + "retention: {events: -1h}\n", "config: retention.events: must be positive, got -1h0m0s"},
		{"metrics token", validBase + "metrics: {token: short}\n", "config: metrics.token: too short: a token must be at least 16 characters"},
		{"metrics token space", validBase + "metrics: {token: 'metrics-token-0123456789 '}\n", "config: metrics.token: must not contain spaces or control characters"},
		{"metrics token control", validBase + "metrics: {token: \"metrics-token\\t0123456789\"}\n", "config: metrics.token: must not contain spaces or control characters"},
		{"breaker", validBase + "routes: [{name: r, sources: [stripe], url: 'http://x', breaker_threshold: -1}]\n", "config: routes[0].breaker_threshold: must be >= 0 (0: no breaker), got -1"},
		{"route timeout", validBase + "routes: [{name: r, sources: [stripe], url: 'http://x', timeout: -1s}]\n", "config: routes[0].timeout: must be positive, got -1s"},
		{"concurrency fraction", validBase + "routes: [{name: r, sources: [stripe], url: 'http://x', concurrency: 2.5}]\n", `config: routes[0].concurrency: line 6: cannot use "2.5" as an integer`},
		{"concurrency high", validBase + "routes: [{name: r, sources: [stripe], url: 'http://x', concurrency: 100000000}]\n", "config: routes[0].concurrency: must be at most 10000, got 100000000"},
		{"concurrency", validBase + "routes: [{name: r, sources: [stripe], url: 'http://x', concurrency: 0}]\n", "config: routes[0].concurrency: must be positive, got 0"},
		{"rate negative", validBase + "routes: [{name: r, sources: [stripe], url: 'http://x', rate: -0.5}]\n", "config: routes[0].rate: must be a number >= 0 (0: unlimited), got -0.5"},
		{"rate nan", validBase + "routes: [{name: r, sources: [stripe], url: 'http://x', rate: .nan}]\n", "config: routes[0].rate: must be a number >= 0 (0: unlimited), got NaN"},
		{"rate inf", validBase + "routes: [{name: r, sources: [stripe], url: 'http://x', rate: .inf}]\n", "config: routes[0].rate: must be a number >= 0 (0: unlimited), got +Inf"},
		{"retries", validBase + "routes: [{name: r, sources: [stripe], url: 'http://x', retries: -1}]\n", "config: routes[0].retries: must be >= 0, got -1"},
		{"schedule entry", validBase + "routes: [{name: r, sources: [stripe], url: 'http://x', schedule: [1m, 0s, -1h]}]\n", "config: routes[0].schedule[1]: must be positive, got 0s"},
		{"schedule negative", validBase + "routes: [{name: r, sources: [stripe], url: 'http://x', schedule: [1m, 0s, -1h]}]\n", "config: routes[0].schedule[2]: must be positive, got -1h0m0s"},
		{"schedule empty", validBase + "routes: [{name: r, sources: [stripe], url: 'http://x', schedule: []}]\n", "config: routes[0].schedule: must not be empty (leave it out for the default)"},
		{"header name", validBase + "routes: [{name: r, sources: [stripe], url: 'http://x', headers: {'Bad Header': v}}]\n", `config: routes[0].headers["Bad Header"]: invalid header name`},
		{"header name empty", validBase + "routes: [{name: r, sources: [stripe], url: 'http://x', headers: {'': v}}]\n", `config: routes[0].headers[""]: invalid header name`},
		{"header value crlf", validBase + "routes: [{name: r, sources: [stripe], url: 'http://x', headers: {X-A: \"v\\r\\nX-Evil: 1\"}}]\n", "config: routes[0].headers.X-A: value must not contain CR, LF or other control characters"},
		{"header value lf", validBase + "routes: [{name: r, sources: [stripe], url: 'http://x', headers: {X-A: \"v\\n\"}}]\n", "config: routes[0].headers.X-A: value must not contain CR, LF or other control characters"},
		{"header case duplicate", validBase + "routes: [{name: r, sources: [stripe], url: 'http://x', headers: {x-team: a, X-Team: b}}]\n", `config: routes[0].headers.x-team: same header as "X-Team" (names are case-insensitive)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := parseErr(t, tc.src, nil)
			if prefix, ok := strings.CutSuffix(tc.want, "…"); ok {
				wantErrorMatch(t, err, "^"+regexpQuote(prefix))
			} else {
				wantError(t, err, tc.want)
			}
			for _, l := range errorLines(err) {
				if !strings.HasPrefix(l, "config: ") {
					t.Errorf("message %q lacks the config: prefix", l)
				}
			}
		})
	}
}

// schemeList is the registered schemes as the unknown-scheme message lists them.
func schemeList() string {
	names := signature.Names()
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

func regexpQuote(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\.+*?()|[]{}^$`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// All problems are reported at once, in document order.
func TestValidationCollectsAll(t *testing.T) {
	err := parseErr(t, `
log: {level: loud}
sources:
  - {name: a, verify: foo}
  - {name: a, verify: stripe}
routes:
  - {name: r, sources: [b], url: "mailto:x@y"}
`, nil)
	want := []string{
		`config: log.level: unknown level "loud" (want debug, info, warn or error)`,
		`config: sources[0].verify: unknown scheme "foo" (want ` + schemeList() + `)`,
		`config: sources[1].name: duplicate source "a"`,
		`config: sources[1].secrets: required for verify: stripe`,
		`config: routes[0].sources[0]: unknown source "b"`,
		`config: routes[0].url: must be an absolute http:// or https:// URL with a host`,
	}
	if got := errorLines(err); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Secrets and URLs never appear in error messages.
func TestErrorsDoNotEchoSecrets(t *testing.T) {
	const secret = "SUPERSECRETVALUE"
	err := parseErr(t, `
sources:
  - {name: a, verify: standard, secrets: ["`+secret+`"]}
  - {name: b, verify: stripe, secrets: [" `+secret+`"]}
routes:
  - {name: r, sources: [a], url: "ftp://user:`+secret+`@host", secret: "`+secret+`"}
`, nil)
	if strings.Contains(err.Error(), secret) {
		t.Errorf("error echoes a secret:\n%v", err)
	}
}

// nats.url takes every form nats.go connects with.
func TestNATSURLForms(t *testing.T) {
	for _, u := range []string{
		"nats://n1:4222,nats://n2:4222",
		"127.0.0.1:4222",
		"nats://token@h",
		"tls://user:password@h:4443,nats://h2",
		"NATS://h:4222",
		"nats://h:",
		" nats://a:4222 , b:4222",
		"ws://a:8080,b:8080",
		"wss://h/path",
		"nats://:4222",
	} {
		mustParse(t, "nats: {url: '"+u+"'}\n"+validBase, nil)
	}
}

// A malformed nats.url is refused without its credentials.
func TestNATSURLErrorsDoNotEchoCredentials(t *testing.T) {
	const secret = "s3cretTokenABCDEFGH"
	for _, u := range []string{
		"nats://" + secret + "@127.0.0.1:42x22",
		"nats://user:" + secret + "@[::1:4222",
		"user:" + secret + "@h:42x22",
		"http://" + secret + "@h:4222",
		"nats://" + secret + "@h:70000",
		"nats://a,ws://" + secret + "@b",
	} {
		err := parseErr(t, "nats: {url: '"+u+"'}\n"+validBase, nil)
		if strings.Contains(err.Error(), secret) {
			t.Errorf("nats.url %q: error echoes the credentials:\n%v", u, err)
		}
		wantErrorMatch(t, err, `^config: nats\.url\[\d\]: `)
	}
}

// nats.replicas above 1 is for an external cluster, in cluster mode or not.
func TestReplicasWithExternalNATS(t *testing.T) {
	mustParse(t, "nats: {url: 'nats://n1:4222,nats://n2:4222,nats://n3:4222', replicas: 3}\n"+validBase, nil)
	mustParse(t, "nats: {url: 'nats://n1:4222', replicas: 5}\ncluster: {enabled: true}\n"+validBase, nil)
	mustParse(t, "nats: {replicas: 1}\n"+validBase, nil)
}

func TestClusterNeedsExternalNATS(t *testing.T) {
	_, err := Parse([]byte("sources: [{name: s, verify: none, id_header: X-Id}]\ncluster: {enabled: true}\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "cluster.enabled: needs nats.url") {
		t.Fatalf("err = %v, want cluster.enabled: needs nats.url", err)
	}
}

// A config without sources is valid when it serves tasks (/v1/tasks is
// open to tasks.tokens and api.tokens); one that serves nothing is refused.
func TestTaskOnlyConfig(t *testing.T) {
	const tok = "task-only-token-0123456789"
	for _, tc := range []struct {
		name, src string
		want      string // "" when valid
	}{
		{"tasks.tokens", "tasks: {tokens: [" + tok + "]}\n", ""},
		{"api.tokens", "api: {tokens: [" + tok + "]}\n", ""},
		{"tasks.tokens, sources: []", "sources: []\ntasks: {tokens: [" + tok + "]}\n", ""},
		{"tasks without tokens", "tasks: {secret: " + testStandardSecret + "}\n",
			"config: sources: nothing to serve: add a source, or tasks.tokens (or api.tokens) for a gateway that only forwards tasks"},
		{"empty tasks.tokens", "tasks: {tokens: []}\n",
			"config: sources: nothing to serve: add a source, or tasks.tokens (or api.tokens) for a gateway that only forwards tasks"},
		{"a route without a source", "tasks: {tokens: [" + tok + "]}\nroutes: [{name: r, sources: [stripe], url: 'https://example.com/h'}]\n",
			`config: routes[0].sources[0]: unknown source "stripe"`},
		{"a bad token is the token's error only", "tasks: {tokens: [short]}\n",
			"config: tasks.tokens[0]: too short: a token must be at least 16 characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.src), env(nil))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Parse: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("Parse succeeded, want %s", tc.want)
			case tc.want != "" && strings.Join(errorLines(err), "\n") != tc.want:
				t.Fatalf("got\n%s\nwant\n%s", strings.Join(errorLines(err), "\n"), tc.want)
			}
		})
	}
}
