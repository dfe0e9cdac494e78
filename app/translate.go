package app

import (
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/inbound"
	"github.com/hookgate/hookgate/jetstream"
	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/signature"
	"github.com/hookgate/hookgate/store"
	"github.com/hookgate/hookgate/tasks"
)

// The functions below translate the loaded file (package config) into each
// package's own runtime Config. They only copy: config.Load has applied
// the defaults and validated the values. Secrets leave config's masking
// types here; the runtime types that hold them mask them when printed.

// storeConfig is the store's Config, without its callbacks.
func storeConfig(c config.Store) store.Config {
	return store.Config{
		Path:     c.Path,
		BatchMax: c.BatchMax,
		Readers:  c.Readers,
		// Frames of 4 KiB pages.
		WALRestartFrames: c.WALMaxMB << 8,
		WALZeroFill:      c.WALZeroFill,
	}
}

// brokerConfig is the broker's Config.
func brokerConfig(n config.NATS) jetstream.Config {
	return jetstream.Config{
		URL: n.URL.Reveal(), Port: n.Port, StoreDir: n.StoreDir,
		SyncInterval: n.SyncInterval, SyncAlways: n.SyncAlways,
		Stream: n.Stream, DuplicateWindow: n.DuplicateWindow, Replicas: n.Replicas, Retention: n.Retention,
		ConnectTimeout: n.ConnectTimeout,
		Auth: jetstream.Auth{
			Credentials: n.Credentials, CAFile: n.TLS.CAFile, CertFile: n.TLS.CertFile, KeyFile: n.TLS.KeyFile,
		},
	}
}

// inboundSources are the sources the inbound handler serves.
func inboundSources(cs []config.Source) []inbound.Source {
	out := make([]inbound.Source, len(cs))
	for i, c := range cs {
		out[i] = inbound.Source{
			Name:      c.Name,
			Verify:    c.Verify,
			Secrets:   c.Secrets.Reveal(),
			Tolerance: c.Tolerance,
			MaxBody:   c.MaxBody,
			HMAC: signature.HMACOptions{
				Header: c.HMAC.Header, Prefix: c.HMAC.Prefix,
				Algorithm: c.HMAC.Algorithm, Encoding: c.HMAC.Encoding,
			},
			IDHeader:   c.IDHeader,
			IDField:    c.IDField,
			TypeHeader: c.TypeHeader,
			TypeField:  c.TypeField,
			IDExpr:     c.IDExpr,
			TypeExpr:   c.TypeExpr,
		}
	}
	return out
}

// outboundRoutes are the routes the engine delivers to.
func outboundRoutes(cs []config.Route) []outbound.Route {
	out := make([]outbound.Route, len(cs))
	for i, c := range cs {
		out[i] = outbound.Route{
			Name:             c.Name,
			Sources:          c.Sources,
			Events:           c.Events,
			Filter:           c.Filter,
			URL:              c.URL.Reveal(),
			Proxy:            c.Proxy.Reveal(),
			Secret:           c.Secret.Reveal(),
			Headers:          c.Headers,
			Timeout:          c.Timeout,
			Concurrency:      c.Concurrency,
			Rate:             c.Rate,
			Retries:          c.Retries,
			RetryWaitMin:     c.RetryWaitMin,
			RetryWaitMax:     c.RetryWaitMax,
			BreakerThreshold: c.BreakerThreshold,
			BreakerCooldown:  c.BreakerCooldown,
			Schedule:         c.Schedule,
		}
	}
	return out
}

// outboundTasks is the engine's task route.
func outboundTasks(c config.Tasks) *outbound.Tasks {
	return &outbound.Tasks{
		Secret:       c.Secret.Reveal(),
		Timeout:      c.Timeout,
		Concurrency:  c.Concurrency,
		PerToken:     c.TokenConcurrency,
		Retries:      c.Retries,
		RetryWaitMin: c.RetryWaitMin,
		RetryWaitMax: c.RetryWaitMax,
		Schedule:     c.Schedule,
	}
}

// tasksConfig is the task API's Config.
func tasksConfig(c config.Tasks) tasks.Config {
	return tasks.Config{KeyTTL: c.KeyTTL, MaxBody: c.MaxBody}
}
