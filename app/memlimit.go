package app

import (
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/hookgate/hookgate/config"
)

// setMemoryLimit sets the process's soft memory limit (see
// nats.memory_limit_mb): the embedded nats-server keeps each stream block
// it wrote, read or compacted in the last 10 s in memory, and lets go of
// it for the garbage collector to free; with the default GOGC the heap
// grows to twice what is live before a collection, which while delivery
// lags is mostly those caches.
func setMemoryLimit(cfg *config.Config, log *slog.Logger) {
	if limit := memoryLimit(cfg, os.Getenv); limit > 0 {
		debug.SetMemoryLimit(limit)
		log.Info("soft memory limit set", "mib", limit>>20)
	}
}

// memoryLimit is the limit to set, in bytes; 0: none.
func memoryLimit(cfg *config.Config, getenv func(string) string) int64 {
	if cfg.NATS.URL != "" || cfg.NATS.MemoryLimitMB <= 0 || getenv("GOMEMLIMIT") != "" {
		return 0
	}
	return int64(cfg.NATS.MemoryLimitMB) << 20
}
