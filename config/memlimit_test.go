package config

import "testing"

// nats.memory_limit_mb: 160 unless set; 0 set explicitly means none.
func TestMemoryLimitDefault(t *testing.T) {
	if c := mustParse(t, validBase, nil); c.NATS.MemoryLimitMB != DefaultMemoryLimitMB || DefaultMemoryLimitMB != 160 {
		t.Errorf("default nats.memory_limit_mb: %d", c.NATS.MemoryLimitMB)
	}
	if c := mustParse(t, "nats: {memory_limit_mb: 0}\n"+validBase, nil); c.NATS.MemoryLimitMB != 0 {
		t.Errorf("nats.memory_limit_mb 0: %d, want 0 (none)", c.NATS.MemoryLimitMB)
	}
}
