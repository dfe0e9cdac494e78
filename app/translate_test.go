package app

import (
	"reflect"
	"testing"
	"time"

	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/inbound"
	"github.com/hookgate/hookgate/jetstream"
	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/signature"
	"github.com/hookgate/hookgate/store"
	"github.com/hookgate/hookgate/tasks"
)

var sched = []time.Duration{time.Minute, time.Hour}

func TestTranslate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		got, want any
	}{
		{"store",
			storeConfig(config.Store{Path: "/d/h.db", BatchMax: 7, Readers: 3, WALMaxMB: 2, WALZeroFill: true}),
			store.Config{Path: "/d/h.db", BatchMax: 7, Readers: 3, WALRestartFrames: 512, WALZeroFill: true}},
		{"nats",
			brokerConfig(config.NATS{URL: "nats://tok@h:4222", Port: 4223, StoreDir: "/d/js",
				SyncInterval: time.Second, SyncAlways: true, Stream: "S", DuplicateWindow: time.Minute,
				Retention: "limits", Replicas: 3, ConnectTimeout: 2 * time.Second, OutboxMaxAge: time.Hour,
				Credentials: "/c", TLS: config.NATSTLS{CAFile: "/ca", CertFile: "/cert", KeyFile: "/key"}}),
			jetstream.Config{URL: "nats://tok@h:4222", Port: 4223, StoreDir: "/d/js",
				SyncInterval: time.Second, SyncAlways: true, Stream: "S", DuplicateWindow: time.Minute,
				Retention: "limits", Replicas: 3, ConnectTimeout: 2 * time.Second,
				Auth: jetstream.Auth{Credentials: "/c", CAFile: "/ca", CertFile: "/cert", KeyFile: "/key"}}},
		{"sources",
			inboundSources([]config.Source{
				{Name: "st", Verify: "stripe", Secrets: config.Secrets{"whsec_a", "whsec_b"},
					Tolerance: time.Minute, MaxBody: 10, IDField: "id", TypeField: "type"},
				{Name: "h", Verify: "hmac", Secrets: config.Secrets{"k"}, MaxBody: 20,
					HMAC:     config.HMAC{Header: "X-Sig", Prefix: "sha512=", Algorithm: "sha512", Encoding: "base64"},
					IDHeader: "X-Id", TypeHeader: "X-Type"},
				{Name: "j", Verify: "none", IDExpr: `body.job.id + ":" + body.status`, TypeExpr: `"job." + body.status`},
			}),
			[]inbound.Source{
				{Name: "st", Verify: "stripe", Secrets: []string{"whsec_a", "whsec_b"},
					Tolerance: time.Minute, MaxBody: 10, IDField: "id", TypeField: "type"},
				{Name: "h", Verify: "hmac", Secrets: []string{"k"}, MaxBody: 20,
					HMAC:     signature.HMACOptions{Header: "X-Sig", Prefix: "sha512=", Algorithm: "sha512", Encoding: "base64"},
					IDHeader: "X-Id", TypeHeader: "X-Type"},
				{Name: "j", Verify: "none", Secrets: []string{}, IDExpr: `body.job.id + ":" + body.status`, TypeExpr: `"job." + body.status`},
			}},
		{"no sources", inboundSources(nil), []inbound.Source{}},
		{"routes",
			outboundRoutes([]config.Route{{Name: "r", Sources: []string{"st"}, Events: []string{"invoice.*"}, Filter: "body.livemode",
				URL: "https://u:p@x.test/hook", Secret: "whsec_c", Headers: config.Headers{"Authorization": "Bearer t"},
				Timeout: time.Second, Concurrency: 3, Rate: 2.5, Retries: 0, BreakerThreshold: 4,
				BreakerCooldown: time.Minute, RetryWaitMin: time.Millisecond, RetryWaitMax: time.Second, Schedule: sched}}),
			[]outbound.Route{{Name: "r", Sources: []string{"st"}, Events: []string{"invoice.*"}, Filter: "body.livemode",
				URL: "https://u:p@x.test/hook", Secret: "whsec_c", Headers: map[string]string{"Authorization": "Bearer t"},
				Timeout: time.Second, Concurrency: 3, Rate: 2.5, Retries: 0, BreakerThreshold: 4,
				BreakerCooldown: time.Minute, RetryWaitMin: time.Millisecond, RetryWaitMax: time.Second, Schedule: sched}}},
		{"task route",
			outboundTasks(config.Tasks{Secret: "whsec_d", Allow: []string{"10.0.0.0/8"}, KeyTTL: time.Hour,
				Timeout: time.Second, Concurrency: 5, TokenConcurrency: 2, Retries: 1, RetryWaitMin: time.Millisecond,
				RetryWaitMax: time.Second, Schedule: sched, MaxBody: 99, Tokens: config.Secrets{"tok"}}),
			&outbound.Tasks{Secret: "whsec_d", Timeout: time.Second, Concurrency: 5, PerToken: 2, Retries: 1,
				RetryWaitMin: time.Millisecond, RetryWaitMax: time.Second, Schedule: sched}},
		{"task API",
			tasksConfig(config.Tasks{Secret: "whsec_d", KeyTTL: time.Hour, Timeout: time.Second, MaxBody: 99}),
			tasks.Config{KeyTTL: time.Hour, MaxBody: 99}},
	}
	for _, c := range cases {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s:\n got %#v\nwant %#v", c.name, c.got, c.want)
		}
	}
}

// TestTranslateEveryField translates configs with every field set and
// finds every field of each runtime Config set, but those app sets itself
// or leaves to the package: a field added to a runtime Config is not
// forgotten here.
func TestTranslateEveryField(t *testing.T) {
	t.Parallel()
	tc := config.Tasks{Secret: "s", KeyTTL: 1, Timeout: 1, Proxy: "p", Concurrency: 1, TokenConcurrency: 1, Retries: 1,
		RetryWaitMin: 1, RetryWaitMax: 1, Schedule: sched, MaxBody: 1}
	cases := []struct {
		name   string
		v      any
		unused []string
	}{
		{"store", storeConfig(config.Store{Path: "p", BatchMax: 1, Readers: 1, WALMaxMB: 1, WALZeroFill: true}),
			[]string{"OnCommit", "OnWALRestart"}},
		{"nats", brokerConfig(config.NATS{URL: "u", Port: 1, StoreDir: "d", SyncInterval: 1, SyncAlways: true,
			Stream: "s", DuplicateWindow: 1, Retention: "r", Replicas: 1, ConnectTimeout: 1,
			Credentials: "c", TLS: config.NATSTLS{CAFile: "a", CertFile: "c", KeyFile: "k"}}), []string{"Name", "RetireAfter"}},
		{"source", inboundSources([]config.Source{{Name: "n", Verify: "v", Secrets: config.Secrets{"s"},
			Tolerance: 1, MaxBody: 1, HMAC: config.HMAC{Header: "h", Prefix: "p", Algorithm: "a", Encoding: "e"},
			IDHeader: "h", IDField: "f", TypeHeader: "h", TypeField: "f",
			IDExpr: "i", TypeExpr: "t"}})[0], nil},
		{"route", outboundRoutes([]config.Route{{Name: "n", Sources: []string{"s"}, Events: []string{"e"}, Filter: "f",
			URL: "u", Proxy: "p", Secret: "s", Timeout: 1, Headers: config.Headers{"h": "v"}, Concurrency: 1, Rate: 1,
			Retries: 1, BreakerThreshold: 1, BreakerCooldown: 1, RetryWaitMin: 1, RetryWaitMax: 1,
			Schedule: sched}})[0], nil},
		{"task route", *outboundTasks(tc), nil},
		{"task API", tasksConfig(tc), []string{"Cluster", "ClusterTimeout", "MaxStored"}}, // set by App.tasksConfig: in cluster mode; from the broker
	}
	for _, c := range cases {
		checkSet(t, c.name, reflect.ValueOf(c.v), c.unused)
	}
}

func checkSet(t *testing.T, name string, v reflect.Value, unused []string) {
	t.Helper()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		skip := false
		for _, u := range unused {
			skip = skip || u == f.Name
		}
		if skip {
			continue
		}
		if f.Type.Kind() == reflect.Struct {
			checkSet(t, name+"."+f.Name, v.Field(i), nil)
		} else if v.Field(i).IsZero() {
			t.Errorf("%s.%s is not translated", name, f.Name)
		}
	}
}
