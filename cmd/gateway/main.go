// Command gateway runs hookgate: webhook intake, dedup and delivery in one
// binary. Usage: gateway [-config PATH].
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/hookgate/hookgate/app"
	"github.com/hookgate/hookgate/config"
)

func main() {
	configPath := flag.String("config", "config.yaml", "path of the YAML config file")
	flag.Parse()

	cfg, err := config.Load(*configPath)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gateway: %v\n", err)
		os.Exit(2)
	}
	log := app.NewLogger(os.Stderr, cfg.Log)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() { <-ctx.Done(); stop() }() // a second signal exits at once
	if err := app.Run(ctx, cfg, log); err != nil {
		log.Error("gateway failed", "err", err)
		os.Exit(1)
	}
}
