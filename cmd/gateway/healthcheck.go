package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// defaultHealthURL is what healthcheck probes by default: the image's
// listener, from inside the container.
const defaultHealthURL = "http://127.0.0.1:8080/healthz"

// healthcheck GETs a URL once and exits 0 on a 2xx, 1 on any other
// answer or none, 2 on bad usage. The image has no curl: this is its
// HEALTHCHECK.
func healthcheck(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("gateway healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	target := fs.String("url", defaultHealthURL, "what to GET")
	timeout := fs.Duration("timeout", 5*time.Second, "the most it waits")
	if fs.Parse(args) != nil {
		return 2
	}
	if fs.NArg() > 0 {
		return usageError(stderr, "healthcheck: unexpected argument %q", fs.Arg(0))
	}
	if u, err := url.Parse(*target); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return usageError(stderr, "healthcheck: -url must be an absolute http:// or https:// URL with a host")
	}
	if *timeout <= 0 {
		return usageError(stderr, "healthcheck: -timeout must be positive, got %s", *timeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *target, nil)
	if err != nil {
		return usageError(stderr, "healthcheck: %v", err)
	}
	req.Header.Set("User-Agent", "hookgate-healthcheck")
	client := &http.Client{
		Transport:     &http.Transport{Proxy: nil, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "gateway: healthcheck: %v\n", err)
		return 1
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		fmt.Fprintf(stderr, "gateway: healthcheck: %s\n", resp.Status)
		return 1
	}
	return 0
}
