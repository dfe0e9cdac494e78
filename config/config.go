// Package config loads and validates hookgate's YAML configuration.
//
// Load reads a file, replaces ${NAME} in scalar values with the environment
// variable NAME, refuses unknown keys, applies the defaults stated on each
// field and validates the result. Every error names the offending key, for
// example `sources[1].verify: unknown scheme "foo"`.
//
// Credentials are held in types that mask themselves wherever they are
// printed (YAML, JSON, fmt, slog): Secret, Secrets, URL and Headers. The
// code that uses one asks for it with Reveal.
package config

import "time"

// Config is the whole gateway configuration. Load and Parse fill in the
// default stated in each field's comment for every key the file leaves out
// (or sets to null) and for every empty string. A number or duration the
// file sets explicitly is kept and validated instead: `retries: 0` means no
// quick retries, and `timeout: 0s` is refused (must be positive).
type Config struct {
	// Listen is the HTTP listen address. Default "127.0.0.1:8080".
	Listen string `yaml:"listen"`
	// DataDir holds the SQLite database and the embedded JetStream store.
	// Default "./data". Created if missing.
	DataDir string `yaml:"data_dir"`
	// ShutdownTimeout bounds a graceful shutdown. Default 20s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`

	Log       Log       `yaml:"log"`
	NATS      NATS      `yaml:"nats"`
	Store     Store     `yaml:"store"`
	Sources   []Source  `yaml:"sources"` // default none: a task-only gateway (needs tasks.tokens or api.tokens)
	API       API       `yaml:"api,omitempty"`
	Routes    []Route   `yaml:"routes"`
	Tasks     Tasks     `yaml:"tasks"`
	Retention Retention `yaml:"retention"`
	Metrics   Metrics   `yaml:"metrics,omitempty"`
	HTTP      HTTP      `yaml:"http"`
	Cluster   Cluster   `yaml:"cluster"`
	Alerts    Alerts    `yaml:"alerts"`
}

// Alerts sends signed notices to an operator's endpoint (README "Alerts").
type Alerts struct {
	// URL receives the notices: a JSON POST with a Slack-compatible "text".
	// Default none: no alerts.
	URL URL `yaml:"url"`
	// Secret is the Standard Webhooks secret ("whsec_<base64>") signing
	// the notices. Required with url.
	Secret Secret `yaml:"secret"`
	// DeadLetterInterval is the least time between two dead-letter notices
	// of one route; each carries the count since the last. Default 5m.
	DeadLetterInterval time.Duration `yaml:"dead_letter_interval"`
	// OutboxAge is the age of the outbox's oldest event past which a notice
	// says intake is not reaching JetStream (and another when it is back
	// under). Default nats.outbox_max_age.
	OutboxAge time.Duration `yaml:"outbox_age"`
}

// HTTP bounds the HTTP server: connections, timeouts and request bodies.
type HTTP struct {
	// MaxConnections is the most connections open at once; further ones
	// wait in the kernel's listen backlog until one closes. Default 4096.
	// At start it is lowered, if need be, to leave room under the process's
	// open-file limit for SQLite, NATS and outbound sockets (the value in
	// force is logged).
	MaxConnections int `yaml:"max_connections"`
	// ReadTimeout bounds receiving one request, headers and body, counted
	// from the connection's opening or from the request's first byte on a
	// kept-alive connection; a connection that sends nothing is closed
	// after it. Default 30s.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// WriteTimeout bounds writing one answer. Default 30s.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// IdleTimeout is how long a kept-alive connection may wait for its next
	// request. Default 120s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// BodyMemory is the most bytes of request bodies held at once, counted
	// as they arrive (each time a body's buffer grows), never by a declared
	// length. A body that finds no room within 2s is answered 503
	// server_busy with Retry-After. Must be at least every max_body.
	// Default 67108864 (64 MiB).
	BodyMemory int `yaml:"body_memory"`
}

// Tasks configures POST /v1/tasks, the task-forwarding API.
type Tasks struct {
	// Secret is a Standard Webhooks secret signing task deliveries.
	// Empty: unsigned.
	Secret Secret `yaml:"secret"`
	// Allow lists hosts ("billing.internal", "*.corp"), IPs or CIDRs that
	// task URLs may reach although private, loopback or link-local.
	Allow []string `yaml:"allow"`
	// KeyTTL is how long an Idempotency-Key is remembered. Default 24h.
	KeyTTL time.Duration `yaml:"key_ttl"`
	// Timeout per attempt. Default 15s.
	Timeout time.Duration `yaml:"timeout"`
	// Proxy is a forward proxy for task requests, as routes[].proxy.
	// Default "": none. The egress check at dial time (allow) then applies
	// to the proxy's address; task URLs are still checked when submitted,
	// and the proxy must refuse what tasks must not reach.
	Proxy URL `yaml:"proxy"`
	// Concurrency is the most task attempts in flight. Default 16; at
	// most MaxConcurrency.
	Concurrency int `yaml:"concurrency"`
	// TokenConcurrency is the most attempts in flight of the tasks one
	// token submitted, so that one client's slow destinations cannot hold
	// every worker. Default (absent or 0) a quarter of Concurrency, at
	// least 1, set at load; at most MaxConcurrency.
	TokenConcurrency int `yaml:"token_concurrency"`
	// Retries, RetryWaitMin, RetryWaitMax and Schedule are as on a route.
	// Defaults 2, 1s, 30s and the route default schedule.
	Retries      int             `yaml:"retries"`
	RetryWaitMin time.Duration   `yaml:"retry_wait_min"`
	RetryWaitMax time.Duration   `yaml:"retry_wait_max"`
	Schedule     []time.Duration `yaml:"schedule"`
	// MaxBody is the largest task request accepted, in bytes. Default 1048576.
	MaxBody int `yaml:"max_body"`
	// Tokens are bearer tokens of task clients, each at least 16
	// characters and not also in api.tokens: a task client submits tasks
	// and sees and retries its own only. Default none.
	Tokens Secrets `yaml:"tokens"`
}

// Retention bounds how long records are kept; pruning runs in the
// background in small batches.
type Retention struct {
	// Events is how long inbound events (the dedup records) are kept once
	// every route finished with them. Default 720h (30 days), longer than
	// any provider's retry window.
	Events time.Duration `yaml:"events"`
	// Attempts is how long attempt records are kept. Default 720h.
	Attempts time.Duration `yaml:"attempts"`
	// Interval between pruning passes. Default 1m.
	Interval time.Duration `yaml:"interval"`
}

// Metrics configures GET /metrics.
type Metrics struct {
	// Token, if set, must be sent as a bearer token to read /metrics: at
	// least 16 characters, without spaces or control characters.
	Token Secret `yaml:"token"`
}

// Log configures the process logger.
type Log struct {
	// Level is debug, info, warn or error. Default info.
	Level string `yaml:"level"`
	// Format is text or json. Default text.
	Format string `yaml:"format"`
}

// NATS selects and tunes the broker.
type NATS struct {
	// URL of an external NATS server; comma-separated for a cluster. Each
	// is nats://, tls://, ws:// or wss://, or host:port (nats://).
	// Empty (the default) runs an embedded JetStream server in-process.
	URL URL `yaml:"url"`
	// Port makes the embedded server listen for clients on 127.0.0.1:Port.
	// Default 0: no listener, in-process connections only.
	Port int `yaml:"port"`
	// StoreDir is the embedded server's JetStream store.
	// Default "<data_dir>/jetstream".
	StoreDir string `yaml:"store_dir"`
	// SyncInterval is how often the embedded server fsyncs its store.
	// Default 1s. Safety does not depend on it: what JetStream loses is
	// re-published from SQLite at start, so it bounds that work after a
	// power cut; 1s measured no slower than nats-server's own 2m
	// (bench/RESULTS.md). Ignored when SyncAlways is set.
	SyncInterval time.Duration `yaml:"sync_interval"`
	// SyncAlways makes the embedded server fsync every write. Default false.
	SyncAlways bool `yaml:"sync_always"`
	// MemoryLimitMB is, with the embedded server, the process's soft
	// memory limit in MiB (Go's GOMEMLIMIT, set at start): the garbage
	// collector then frees the server's released block caches before RSS
	// passes it, which bounds RSS while delivery lags intake (366 MB
	// without it in bench/RESULTS.md). Default 160; 0: none; at most
	// MaxMemoryLimitMB. Not set with an external server, nor when
	// GOMEMLIMIT is in the environment.
	MemoryLimitMB int `yaml:"memory_limit_mb"`
	// Stream is the JetStream stream for inbound events. Default "HOOKGATE_EVENTS".
	Stream string `yaml:"stream"`
	// DuplicateWindow is the stream's Nats-Msg-Id dedup window. Default 20s.
	// It covers the relay's re-publishes (a lost publish ack, a quick
	// restart between publish and mark); the server keeps every ID of the
	// window in memory (about 350 bytes each: rate × window). A copy
	// published after it is still delivered once while the store records
	// outcomes: the engine skips a delivery recorded as done and never runs
	// two rounds of one delivery at once.
	DuplicateWindow time.Duration `yaml:"duplicate_window"`
	// Retention is the stream's retention: "interest" (the default) drops a
	// message once every route's consumer has acknowledged it, so the
	// stream stays small; "limits" keeps every message (for inspection; it
	// grows without bound).
	Retention string `yaml:"retention"`
	// Replicas of the stream on an external cluster: 1 to 5. Default 1,
	// the only value with the embedded server.
	Replicas int `yaml:"replicas"`
	// ConnectTimeout bounds the first connection and the embedded server's
	// start. Default 10s.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// OutboxMaxAge is how old the oldest event not yet acknowledged by
	// JetStream may be before /readyz and /readyz/delivery fail. Default 60s.
	OutboxMaxAge time.Duration `yaml:"outbox_max_age"`
	// Credentials authenticates to an external NATS: a credentials file
	// (a user JWT and its nkey seed, as nsc writes it, for a server in
	// operator mode), or a file holding only a user nkey seed (SU…, for a
	// server that lists the user's public nkey). Default "": none. Needs
	// url.
	Credentials string `yaml:"credentials"`
	// TLS is the connection's TLS beyond the URL's: private CAs and a
	// client certificate. Default: none (tls:// URLs use the system's
	// roots). Needs url.
	TLS NATSTLS `yaml:"tls"`
}

// NATSTLS configures TLS to an external NATS. Every file is read again at
// each (re)connect, so a renewed certificate needs no restart.
type NATSTLS struct {
	// CAFile is a PEM bundle of the CAs that sign the servers'
	// certificates, in place of the system's roots. Default "". Set, it
	// makes the connection TLS whatever the URL's scheme.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// servers that verify clients (mutual TLS). Both or neither. Default "".
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// Store tunes the SQLite store.
type Store struct {
	// Path of the SQLite file. Default "<data_dir>/hookgate.db".
	Path string `yaml:"path"`
	// BatchMax is the most writes one group-commit transaction takes.
	// Default 512; at most MaxBatchMax.
	BatchMax int `yaml:"batch_max"`
	// Readers is the size of the read connection pool. Default 4.
	Readers int `yaml:"readers"`
	// WALMaxMB is the WAL size, in MiB, past which the writer starts the
	// WAL again from its beginning (a RESTART checkpoint, which holds up
	// writes for a few ms, once the checkpointer has written the database
	// back beside them). The WAL also starts again by itself whenever
	// writes pause long enough for the checkpointer to catch up. Smaller
	// means more write-backs competing with commits. Default 1024; at
	// most MaxWALMaxMB.
	WALMaxMB int `yaml:"wal_max_mb"`
	// WALZeroFill fills the WAL file with zeros at start, to wal_max_mb and
	// an eighth (the size a restart cuts it back to), once: a clean stop
	// leaves the file in place. Commits then overwrite it instead of
	// extending it, which makes their fsync cheaper (as PostgreSQL's
	// wal_init_zero and wal_recycle). The file takes that size on disk
	// from the first start, as it does anyway after the first sustained
	// burst; a restored database file needs its WAL deleted. Skipped on
	// btrfs, ZFS and tmpfs, and undone if the disk has no room. Default
	// false; set it in production on ext4 or XFS (the benchmark runs
	// with it).
	WALZeroFill bool `yaml:"wal_zero_fill"`
}

// Source is one webhook sender, served at POST /webhooks/{name}.
type Source struct {
	// Name is the URL segment and the subject token: [a-z0-9_-], required, unique.
	Name string `yaml:"name"`
	// Verify is the signature scheme: stripe, standard, github, hmac, none,
	// or a provider preset (the signature package's registry, signature.Names).
	// Required; "none" must be explicit.
	Verify string `yaml:"verify"`
	// Secrets are tried in turn; any may match (secret rotation).
	// Required unless Verify is none, and refused with none.
	Secrets Secrets `yaml:"secrets"`
	// Tolerance is the allowed clock skew of signed timestamps (stripe,
	// standard, svix, paddle, slack, twitch, discord). Default 5m; twitch
	// 10m, as Twitch documents.
	Tolerance time.Duration `yaml:"tolerance"`
	// MaxBody is the largest accepted body in bytes. Default 1048576 (1 MiB).
	MaxBody int `yaml:"max_body"`

	// HMAC configures verify: hmac.
	HMAC HMAC `yaml:"hmac,omitempty"`

	// IDHeader / IDField say where the event ID is: a request header, or a
	// dot-separated JSON field path ("data.id"). Defaults per scheme
	// (signature.Scheme.ID): stripe field "id", standard header "webhook-id",
	// github header "X-GitHub-Delivery"; hmac and none need one of them.
	IDHeader string `yaml:"id_header"`
	IDField  string `yaml:"id_field"`
	// TypeHeader / TypeField say where the event type is, like the ID.
	// Defaults: stripe field "type", standard field "type" (optional),
	// github header "X-GitHub-Event"; otherwise none (type is empty).
	TypeHeader string `yaml:"type_header"`
	TypeField  string `yaml:"type_field"`
	// IDExpr is a CEL expression (package expr) whose string result is the
	// event ID, e.g. `body.job.id + ":" + body.status`; it reads body,
	// headers, source and type. Replaces id_header / id_field (and the
	// scheme's default); mutually exclusive with them. Default none.
	IDExpr string `yaml:"id_expr"`
	// TypeExpr is a CEL expression whose string result is the event type;
	// it reads body, headers and source. Replaces type_header / type_field
	// (and the scheme's default); mutually exclusive with them. Default none.
	TypeExpr string `yaml:"type_expr"`
}

// HMAC is the generic HMAC scheme: signature = enc(HMAC(secret, body)).
type HMAC struct {
	// Header carrying the signature. Required for verify: hmac.
	Header string `yaml:"header"`
	// Prefix stripped from the header value, e.g. "sha256=". Default none.
	Prefix string `yaml:"prefix"`
	// Algorithm is sha256 or sha512. Default sha256.
	Algorithm string `yaml:"algorithm"`
	// Encoding of the signature: hex or base64. Default hex.
	Encoding string `yaml:"encoding"`
}

// API configures the authenticated /v1 endpoints.
type API struct {
	// Tokens are operators' bearer tokens, each at least 16 characters:
	// they see and act on everything under /v1, every token's tasks
	// included. Default none (with no tasks.tokens either, /v1 is disabled).
	Tokens Secrets `yaml:"tokens"`
}

// Route delivers events from some sources to one downstream URL.
type Route struct {
	// Name is unique, [a-z0-9_-].
	Name string `yaml:"name"`
	// Sources feed this route; each must name a configured source.
	Sources []string `yaml:"sources"`
	// Events are globs on the event type; '*' matches any run of
	// characters, dots included. Empty: every event.
	Events []string `yaml:"events"`
	// Filter is a CEL expression (package expr) over body, source and
	// type: an event for which it is false, or fails (e.g. a missing
	// field), is not delivered to this route but recorded as filtered.
	// Default none: every event the route's sources and events take.
	Filter string `yaml:"filter"`
	// URL is the downstream, http or https. Required.
	URL URL `yaml:"url"`
	// Proxy is a forward proxy for this route's requests: http://,
	// https:// or socks5:// (credentials as userinfo). Default "": none;
	// environment proxies (HTTPS_PROXY) are never used.
	Proxy URL `yaml:"proxy"`
	// Secret is a Standard Webhooks signing secret ("whsec_<base64>").
	// Empty: requests are unsigned.
	Secret Secret `yaml:"secret"`
	// Timeout per attempt. Default 15s.
	Timeout time.Duration `yaml:"timeout"`
	// Headers are added to every request.
	Headers Headers `yaml:"headers"`
	// Concurrency is the most attempts in flight. Default 8; at most
	// MaxConcurrency.
	Concurrency int `yaml:"concurrency"`
	// Rate is the most requests per second; 0 (default) is unlimited.
	Rate float64 `yaml:"rate"`
	// Retries is the number of quick in-process retries per delivery round.
	// Default 2; an explicit 0 disables them.
	Retries int `yaml:"retries"`
	// BreakerThreshold is the run of consecutive failed rounds after which
	// the route is paused for BreakerCooldown, then probed with one
	// delivery. Default 10; 0 disables the breaker.
	BreakerThreshold int           `yaml:"breaker_threshold"`
	BreakerCooldown  time.Duration `yaml:"breaker_cooldown"`
	// RetryWaitMin and RetryWaitMax bound the jittered backoff between quick
	// retries, and a downstream's Retry-After: it can neither park a worker
	// nor make a tight loop. Defaults 1s and 30s.
	RetryWaitMin time.Duration `yaml:"retry_wait_min"`
	RetryWaitMax time.Duration `yaml:"retry_wait_max"`
	// Schedule is the delay before each long-schedule round after the first
	// fails. Default close to Stripe's: 1m 5m 30m 1h 2h 4h 8h 12h 12h 12h 12h 12h
	// (about 3 days over 12 steps). After the last the delivery is dead.
	// Never empty after Load: an explicit empty list is refused.
	Schedule []time.Duration `yaml:"schedule"`
}

// Cluster makes several gateways on one NATS JetStream cluster behave as
// one gateway (README "Running several gateways").
type Cluster struct {
	// Enabled turns cluster mode on. Default false: a single gateway.
	// Requires nats.url (an external NATS cluster).
	Enabled bool `yaml:"enabled"`
	// ClaimTTL is how long a cluster claim of an event (source, event ID)
	// is kept: the dedup horizon across gateways. Default retention.events.
	ClaimTTL time.Duration `yaml:"claim_ttl"`
	// ClaimTimeout is how long intake waits for the cluster claim of an
	// event it just stored before answering it accepted anyway (the relay
	// claims it before publishing); the task API's requests to the claims
	// share it too. Default 500ms.
	ClaimTimeout time.Duration `yaml:"claim_timeout"`
	// RecordsTTL is how long the records stream (HOOKGATE_RECORDS) keeps
	// each event and delivery round it replicates to every gateway: a
	// gateway away for longer misses what expired meanwhile. Default
	// retention.events.
	RecordsTTL time.Duration `yaml:"records_ttl"`
	// TakesTTL is how long a gateway's record of what its routes take
	// (HOOKGATE_TAKES) counts after its last refresh (every third of it):
	// a gateway stopped without a clean stop holds the messages only its
	// routes take for up to twice as long. Default 1m.
	TakesTTL time.Duration `yaml:"takes_ttl"`
}
