package app

import (
	"testing"

	"github.com/hookgate/hookgate/config"
)

// The soft memory limit Run sets: nats.memory_limit_mb with the embedded
// server, none with an external one, none when 0, and a GOMEMLIMIT in the
// environment wins.
func TestMemoryLimit(t *testing.T) {
	env := func(v string) func(string) string { return func(string) string { return v } }
	for _, c := range []struct {
		name   string
		url    string
		mb     int
		getenv func(string) string
		want   int64
	}{
		{"embedded", "", 160, env(""), 160 << 20},
		{"external nats", "nats://127.0.0.1:4222", 160, env(""), 0},
		{"none", "", 0, env(""), 0},
		{"GOMEMLIMIT set", "", 160, env("1GiB"), 0},
		{"largest valid", "", config.MaxMemoryLimitMB, env(""), config.MaxMemoryLimitMB << 20},
	} {
		cfg := &config.Config{}
		cfg.NATS.URL, cfg.NATS.MemoryLimitMB = config.URL(c.url), c.mb
		if got := memoryLimit(cfg, c.getenv); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
