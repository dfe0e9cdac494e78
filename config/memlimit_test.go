package config

import (
	"fmt"
	"testing"
)

// nats.memory_limit_mb: 160 unless set; 0 set explicitly means none.
func TestMemoryLimitDefault(t *testing.T) {
	if c := mustParse(t, validBase, nil); c.NATS.MemoryLimitMB != DefaultMemoryLimitMB || DefaultMemoryLimitMB != 160 {
		t.Errorf("default nats.memory_limit_mb: %d", c.NATS.MemoryLimitMB)
	}
	if c := mustParse(t, "nats: {memory_limit_mb: 0}\n"+validBase, nil); c.NATS.MemoryLimitMB != 0 {
		t.Errorf("nats.memory_limit_mb 0: %d, want 0 (none)", c.NATS.MemoryLimitMB)
	}
}

// The largest value of each bounded integer key is valid.
func TestIntegerBoundsAccepted(t *testing.T) {
	c := mustParse(t, fmt.Sprintf(`store: {batch_max: %d, wal_max_mb: %d}
nats: {memory_limit_mb: %d}
tasks: {concurrency: %[4]d, token_concurrency: %[4]d}
`, MaxBatchMax, MaxWALMaxMB, MaxMemoryLimitMB, MaxConcurrency)+validBase+
		fmt.Sprintf("routes: [{name: r, sources: [stripe], url: 'https://example.com/hook', concurrency: %d}]\n", MaxConcurrency), nil)
	if c.Store.BatchMax != 65536 || c.NATS.MemoryLimitMB != 1<<30 || c.Routes[0].Concurrency != 10000 {
		t.Errorf("bounds: %+v %+v %+v", c.Store, c.NATS, c.Routes[0])
	}
}
