// Command gateway runs hookgate: webhook intake, dedup and delivery in one
// binary.
//
// Usage:
//
//	gateway [-config PATH]               run the gateway
//	gateway check-config [-config PATH]  validate the config; print it resolved, secrets masked
//	gateway version                      print the version (also -version)
//	gateway healthcheck [-url URL] [-timeout D]  exit 0 if URL answers 2xx (the Docker HEALTHCHECK)
//
// Exit status: 0 after a clean shutdown (also one at a signal during
// start-up) or success, 1 if the gateway fails while running, 2 for a bad
// config, bad usage (also one found at start, such as a max_body the
// broker's max payload cannot carry), or a data_dir, store.path or
// embedded nats.store_dir in use by another gateway (each is locked for
// the life of the process: data_dir/LOCK, <store.path>.lock,
// nats.store_dir/LOCK).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"go.yaml.in/yaml/v3"

	"github.com/hookgate/hookgate/app"
	"github.com/hookgate/hookgate/config"
)

const usage = `Usage:
  gateway [-config PATH]               run the gateway
  gateway check-config [-config PATH]  validate the config; print it resolved, secrets masked
  gateway version                      print the version (also -version)
  gateway healthcheck [-url URL] [-timeout D]
                                       exit 0 if URL answers 2xx, else 1 (the Docker HEALTHCHECK)

  -config PATH   the YAML config file (default "config.yaml")
  -url URL       healthcheck: what to GET (default "` + defaultHealthURL + `")
  -timeout D     healthcheck: the most it waits (default 5s)
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command line args (without the program name) and returns
// the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	configPath := "config.yaml"
	fs := flagSet("gateway", &configPath, stderr)
	version := fs.Bool("version", false, "print the version")
	if fs.Parse(args) != nil {
		return 2 // the flag package printed the problem and the usage
	}
	if *version {
		return run(append([]string{"version"}, fs.Args()...), stdout, stderr)
	}
	if fs.NArg() == 0 {
		return serve(configPath, stderr)
	}
	cmd, args := fs.Arg(0), fs.Args()[1:]
	switch cmd {
	case "check-config":
		fs := flagSet("gateway check-config", &configPath, stderr)
		if fs.Parse(args) != nil {
			return 2
		}
		if fs.NArg() > 0 {
			return usageError(stderr, "check-config: unexpected argument %q", fs.Arg(0))
		}
		return checkConfig(configPath, stdout, stderr)
	case "version":
		if len(args) > 0 {
			return usageError(stderr, "version: unexpected argument %q", args[0])
		}
		bi, _ := debug.ReadBuildInfo()
		fmt.Fprintln(stdout, versionString(app.Version, bi))
		return 0
	case "healthcheck":
		return healthcheck(args, stderr)
	case "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	return usageError(stderr, "unknown command %q", cmd)
}

func flagSet(name string, configPath *string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	fs.StringVar(configPath, "config", *configPath, "path of the YAML config file")
	return fs
}

func usageError(stderr io.Writer, format string, args ...any) int {
	fmt.Fprintf(stderr, "gateway: "+format+"\n", args...)
	fmt.Fprint(stderr, usage)
	return 2
}

// printError writes err to stderr, one line per problem of a joined error.
func printError(stderr io.Writer, err error) {
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintf(stderr, "gateway: %s\n", line)
	}
}

// serve runs the gateway until SIGINT or SIGTERM; a second signal exits at
// once.
func serve(configPath string, stderr io.Writer) int {
	cfg, err := config.Load(configPath)
	if err != nil {
		printError(stderr, err)
		return 2
	}
	// Before anything else opens a file there: one gateway per data_dir,
	// store.path and embedded nats.store_dir.
	unlock, err := app.Lock(cfg)
	if err != nil {
		printError(stderr, err)
		var inUse *app.InUseError
		if errors.As(err, &inUse) {
			return 2
		}
		return 1
	}
	log := app.NewLogger(stderr, cfg.Log)
	defer func() {
		if err := unlock(); err != nil {
			log.Warn("unlock", "err", err)
		}
	}()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopSignals := onSignals(cancel)
	defer stopSignals()
	if err := app.Run(ctx, cfg, log); err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			// A signal stopped the start-up: a requested stop.
			log.Info("stopped during start-up", "err", err)
			return 0
		}
		log.Error("gateway failed", "err", err)
		if cfgErr := (*config.Error)(nil); errors.As(err, &cfgErr) {
			return 2
		}
		return 1
	}
	return 0
}

// onSignals calls shutdown at the first SIGINT or SIGTERM; a second one
// ends the process at once, killed by that signal. Both arrive on one
// channel that stays registered, so a second signal is never swallowed
// however late the first one's handling runs.
func onSignals(shutdown func()) (stop func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			shutdown()
		case <-done:
			return
		}
		select {
		case s := <-sigs:
			signal.Reset(os.Interrupt, syscall.SIGTERM)
			_ = syscall.Kill(os.Getpid(), s.(syscall.Signal))
		case <-done:
		}
	}()
	return func() { signal.Stop(sigs); close(done) }
}

// checkConfig loads the config, checks what the start would refuse before
// it serves (app.CheckConfig) and prints it resolved; its secrets mask
// themselves in YAML.
func checkConfig(configPath string, stdout, stderr io.Writer) int {
	cfg, err := config.Load(configPath)
	if err == nil {
		err = app.CheckConfig(cfg)
	}
	if err != nil {
		printError(stderr, err)
		return 2
	}
	var out bytes.Buffer
	out.WriteString("# valid configuration: defaults applied, ${NAME} expanded, secrets masked\n")
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := errors.Join(enc.Encode(cfg), enc.Close()); err != nil {
		printError(stderr, err)
		return 1
	}
	if _, err := stdout.Write(out.Bytes()); err != nil {
		printError(stderr, err)
		return 1
	}
	return 0
}

// versionString is "hookgate VERSION (GOVERSION, OS/ARCH)", VERSION
// followed by "+REVISION" (12 hex digits, ".dirty" if modified) when the
// binary was built from a VCS checkout.
func versionString(version string, bi *debug.BuildInfo) string {
	if bi != nil {
		var rev string
		var dirty bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			sep := "+"
			if strings.Contains(version, "+") {
				sep = "."
			}
			version += sep + rev[:min(12, len(rev))]
			if dirty {
				version += ".dirty"
			}
		}
	}
	return fmt.Sprintf("hookgate %s (%s, %s/%s)", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
