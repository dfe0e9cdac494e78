package app

import (
	"io"
	"log/slog"

	"github.com/hookgate/hookgate/config"
)

// NewLogger returns the process logger described by cfg (validated).
// Records at WARN and above are limited per (level, message): the first 5
// of a kind in 10 s are written, then one "N more like this in the last
// 10s" record when the 10 s end (see logWindow).
func NewLogger(w io.Writer, cfg config.Log) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Level))
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if cfg.Format == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(newLimitHandler(h, realClock, logWindow, logBurst))
}
