package app

import (
	"io"
	"log/slog"

	"github.com/hookgate/hookgate/config"
)

// NewLogger returns the process logger described by cfg (validated).
func NewLogger(w io.Writer, cfg config.Log) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Level))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
