package main

import (
	"context"
	"fmt"
	"net/http"
	_ "net/http/pprof" // -pprof
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
		f.ShutdownWithTimeout(5 * time.Second)
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
		go http.ListenAndServe(pprofAddr, nil)
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
		defer f.Close()
		sigs := make(chan os.Signal, 2)
		signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
		go func() {
			for s := range sigs {
				if s == syscall.SIGUSR1 {
					pprof.StartCPUProfile(f)
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
			pprof.Lookup("allocs").WriteTo(f, 0)
			f.Close()
		}
	}
	if err != nil {
		log.Error("gateway failed", "err", err)
		return 1
	}
	return 0
}
