package config

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/hookgate/hookgate/signature"
)

// Defaults, as stated on the fields of Config.
const (
	DefaultListen            = "127.0.0.1:8080"
	DefaultDataDir           = "./data"
	DefaultShutdownTimeout   = 20 * time.Second
	DefaultLogLevel          = "info"
	DefaultLogFormat         = "text"
	DefaultStream            = "HOOKGATE_EVENTS"
	DefaultDuplicateWindow   = 20 * time.Second
	DefaultSyncInterval      = time.Second
	DefaultMemoryLimitMB     = 160
	DefaultReplicas          = 1
	DefaultConnectTimeout    = 10 * time.Second
	DefaultOutboxMaxAge      = time.Minute
	DefaultBatchMax          = 512
	DefaultReaders           = 4
	DefaultWALMaxMB          = 1024
	DefaultTolerance         = 5 * time.Minute
	DefaultMaxBody           = 1 << 20
	DefaultHMACAlgorithm     = "sha256"
	DefaultHMACEncoding      = "hex"
	DefaultRouteTimeout      = 15 * time.Second
	DefaultConcurrency       = 8
	DefaultRetries           = 2
	DefaultRetryWaitMin      = time.Second
	DefaultBreakerThreshold  = 10
	DefaultBreakerCooldown   = 30 * time.Second
	DefaultKeyTTL            = 24 * time.Hour
	DefaultTaskConcurrency   = 16
	DefaultRetentionEvents   = 30 * 24 * time.Hour
	DefaultRetentionAttempts = 30 * 24 * time.Hour
	DefaultRetentionInterval = time.Minute
	DefaultRetryWaitMax      = 30 * time.Second
	DefaultMaxConnections    = 4096
	DefaultHTTPReadTimeout   = 30 * time.Second
	DefaultHTTPWriteTimeout  = 30 * time.Second
	DefaultHTTPIdleTimeout   = 120 * time.Second
	DefaultBodyMemory        = 64 << 20
)

// DefaultDeadLetterInterval is alerts.dead_letter_interval's default.
const DefaultDeadLetterInterval = 5 * time.Minute

// DefaultClaimTimeout is cluster.claim_timeout's default.
const DefaultClaimTimeout = 500 * time.Millisecond

// DefaultTakesTTL is cluster.takes_ttl's default.
const DefaultTakesTTL = time.Minute

// DefaultSchedule returns a new copy of the default long retry schedule:
// 1m 5m 30m 1h 2h 4h 8h 12h 12h 12h 12h 12h.
func DefaultSchedule() []time.Duration {
	return []time.Duration{
		time.Minute, 5 * time.Minute, 30 * time.Minute,
		time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour,
		12 * time.Hour, 12 * time.Hour, 12 * time.Hour, 12 * time.Hour, 12 * time.Hour,
	}
}

// applyDefaults fills in what the file left out. set reports whether a key
// path was present with a non-null value: numbers and durations that were
// set are kept (and validated), so an explicit 0 is not replaced. Empty
// strings always get their default.
func (c *Config) applyDefaults(set func(path string) bool) {
	str := func(p *string, def string) {
		if *p == "" {
			*p = def
		}
	}
	dur := func(p *time.Duration, path string, def time.Duration) {
		if !set(path) {
			*p = def
		}
	}
	num := func(p *int, path string, def int) {
		if !set(path) {
			*p = def
		}
	}

	str(&c.Listen, DefaultListen)
	str(&c.DataDir, DefaultDataDir)
	dur(&c.ShutdownTimeout, "shutdown_timeout", DefaultShutdownTimeout)

	str(&c.Log.Level, DefaultLogLevel)
	str(&c.Log.Format, DefaultLogFormat)

	str(&c.NATS.StoreDir, filepath.Join(c.DataDir, "jetstream"))
	dur(&c.NATS.SyncInterval, "nats.sync_interval", DefaultSyncInterval)
	num(&c.NATS.MemoryLimitMB, "nats.memory_limit_mb", DefaultMemoryLimitMB)
	str(&c.NATS.Stream, DefaultStream)
	str(&c.NATS.Retention, "interest")
	dur(&c.NATS.DuplicateWindow, "nats.duplicate_window", DefaultDuplicateWindow)
	num(&c.NATS.Replicas, "nats.replicas", DefaultReplicas)
	dur(&c.NATS.ConnectTimeout, "nats.connect_timeout", DefaultConnectTimeout)
	dur(&c.NATS.OutboxMaxAge, "nats.outbox_max_age", DefaultOutboxMaxAge)

	str(&c.Store.Path, filepath.Join(c.DataDir, "hookgate.db"))
	num(&c.Store.BatchMax, "store.batch_max", DefaultBatchMax)
	num(&c.Store.Readers, "store.readers", DefaultReaders)
	num(&c.Store.WALMaxMB, "store.wal_max_mb", DefaultWALMaxMB)

	for i := range c.Sources {
		s := &c.Sources[i]
		p := fmt.Sprintf("sources[%d].", i)
		dur(&s.Tolerance, p+"tolerance", schemeTolerance(s.Verify))
		num(&s.MaxBody, p+"max_body", DefaultMaxBody)
		if s.Verify == "hmac" {
			str(&s.HMAC.Algorithm, DefaultHMACAlgorithm)
			str(&s.HMAC.Encoding, DefaultHMACEncoding)
		}
		scheme, _ := signature.Lookup(s.Verify) // validation reports an unknown one
		idHeader, idField := scheme.ID.Header, scheme.ID.Field
		typeHeader, typeField := scheme.Type.Header, scheme.Type.Field
		// A location the file gives (header or field) replaces both defaults.
		if s.IDHeader == "" && s.IDField == "" && s.IDExpr == "" {
			s.IDHeader, s.IDField = idHeader, idField
		}
		if s.TypeHeader == "" && s.TypeField == "" && s.TypeExpr == "" {
			s.TypeHeader, s.TypeField = typeHeader, typeField
		}
	}

	for i := range c.Routes {
		r := &c.Routes[i]
		p := fmt.Sprintf("routes[%d].", i)
		dur(&r.Timeout, p+"timeout", DefaultRouteTimeout)
		num(&r.Concurrency, p+"concurrency", DefaultConcurrency)
		num(&r.Retries, p+"retries", DefaultRetries)
		dur(&r.RetryWaitMin, p+"retry_wait_min", DefaultRetryWaitMin)
		dur(&r.RetryWaitMax, p+"retry_wait_max", DefaultRetryWaitMax)
		num(&r.BreakerThreshold, p+"breaker_threshold", DefaultBreakerThreshold)
		dur(&r.BreakerCooldown, p+"breaker_cooldown", DefaultBreakerCooldown)
		if !set(p + "schedule") {
			r.Schedule = DefaultSchedule()
		}
	}

	t := &c.Tasks
	dur(&t.KeyTTL, "tasks.key_ttl", DefaultKeyTTL)
	dur(&t.Timeout, "tasks.timeout", DefaultRouteTimeout)
	num(&t.Concurrency, "tasks.concurrency", DefaultTaskConcurrency)
	if t.TokenConcurrency == 0 { // absent or 0: a quarter of concurrency
		t.TokenConcurrency = max(1, t.Concurrency/4)
	}
	num(&t.Retries, "tasks.retries", DefaultRetries)
	dur(&t.RetryWaitMin, "tasks.retry_wait_min", DefaultRetryWaitMin)
	dur(&t.RetryWaitMax, "tasks.retry_wait_max", DefaultRetryWaitMax)
	num(&t.MaxBody, "tasks.max_body", DefaultMaxBody)
	if !set("tasks.schedule") {
		t.Schedule = DefaultSchedule()
	}

	dur(&c.Retention.Events, "retention.events", DefaultRetentionEvents)
	dur(&c.Retention.Attempts, "retention.attempts", DefaultRetentionAttempts)
	dur(&c.Retention.Interval, "retention.interval", DefaultRetentionInterval)
	dur(&c.Cluster.ClaimTTL, "cluster.claim_ttl", c.Retention.Events)
	dur(&c.Cluster.ClaimTimeout, "cluster.claim_timeout", DefaultClaimTimeout)
	dur(&c.Cluster.RecordsTTL, "cluster.records_ttl", c.Retention.Events)
	dur(&c.Cluster.TakesTTL, "cluster.takes_ttl", DefaultTakesTTL)

	num(&c.HTTP.MaxConnections, "http.max_connections", DefaultMaxConnections)
	dur(&c.HTTP.ReadTimeout, "http.read_timeout", DefaultHTTPReadTimeout)
	dur(&c.HTTP.WriteTimeout, "http.write_timeout", DefaultHTTPWriteTimeout)
	dur(&c.HTTP.IdleTimeout, "http.idle_timeout", DefaultHTTPIdleTimeout)
	num(&c.HTTP.BodyMemory, "http.body_memory", DefaultBodyMemory)

	dur(&c.Alerts.DeadLetterInterval, "alerts.dead_letter_interval", DefaultDeadLetterInterval)
	dur(&c.Alerts.OutboxAge, "alerts.outbox_age", c.NATS.OutboxMaxAge)
}

// schemeTolerance is the default tolerance of the verify scheme name.
func schemeTolerance(name string) time.Duration {
	if s, ok := signature.Lookup(name); ok && s.Tolerance > 0 {
		return s.Tolerance
	}
	return DefaultTolerance
}
