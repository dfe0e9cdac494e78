package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	_ "net/http/pprof" //nolint:gosec // G108: served only with -pprof, on the address given
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/hookgate/hookgate/app"
	"github.com/hookgate/hookgate/config"
)

// serveBare serves the baseline: a Fiber handler that reads the body and
// answers a small JSON object, configured like the gateway's server.
func serveBare(addr string) int {
	f := fiber.New(fiber.Config{
		DisableStartupMessage: true,
		BodyLimit:             1<<20 + 1,
		ReadTimeout:           30 * time.Second,
		WriteTimeout:          30 * time.Second,
		IdleTimeout:           120 * time.Second,
	})
	f.Post("/webhooks/:source", func(c *fiber.Ctx) error {
		body := c.Body()
		return c.JSON(fiber.Map{"status": "ok", "source": c.Params("source"), "bytes": len(body)})
	})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		if err := f.ShutdownWithTimeout(5 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, "bare:", err)
		}
	}()
	if err := f.Listen(addr); err != nil {
		fmt.Fprintln(os.Stderr, "bare:", err)
		return 1
	}
	return 0
}

// serveGateway runs the gateway code in this process (the profiling mode):
// SIGUSR1 starts the CPU profile, SIGUSR2 stops it; the allocation profile
// is written at exit.
func serveGateway(cfgPath, cpuprofile, memprofile, pprofAddr string) int {
	if pprofAddr != "" {
		runtime.SetBlockProfileRate(int(10 * time.Microsecond))
		runtime.SetMutexProfileFraction(10)
		go func() {
			//nolint:gosec // G114: a profiling endpoint for this run, no timeouts wanted
			if err := http.ListenAndServe(pprofAddr, nil); err != nil {
				fmt.Fprintln(os.Stderr, "gateway: pprof:", err)
			}
		}()
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		return 2
	}
	log := app.NewLogger(os.Stderr, cfg.Log)
	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "gateway:", err)
			return 1
		}
		defer func() {
			if err := f.Close(); err != nil {
				fmt.Fprintln(os.Stderr, "gateway: cpu profile:", err)
			}
		}()
		sigs := make(chan os.Signal, 2)
		signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
		go func() {
			for s := range sigs {
				if s == syscall.SIGUSR1 {
					if err := pprof.StartCPUProfile(f); err != nil {
						fmt.Fprintln(os.Stderr, "gateway: cpu profile:", err)
					}
				} else {
					pprof.StopCPUProfile()
				}
			}
		}()
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = app.Run(ctx, cfg, log)
	if memprofile != "" {
		runtime.GC()
		if f, ferr := os.Create(memprofile); ferr == nil {
			if werr := errors.Join(pprof.Lookup("allocs").WriteTo(f, 0), f.Close()); werr != nil {
				fmt.Fprintln(os.Stderr, "gateway: allocation profile:", werr)
			}
		}
	}
	if err != nil {
		log.Error("gateway failed", "err", err)
		return 1
	}
	return 0
}
