package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hookgate/hookgate/config"
)

// gateway -version prints what gateway version prints.
func TestCLIVersionFlag(t *testing.T) {
	_, want, _ := runCLI("version")
	code, stdout, stderr := runCLI("-version")
	if code != 0 || stdout != want || stderr != "" {
		t.Errorf("-version: exit %d, stdout %q, stderr %q; want 0 and %q", code, stdout, stderr, want)
	}
}

// gateway healthcheck is the image's HEALTHCHECK (it has no curl): exit 0
// on a 2xx, 1 on any other answer or none, 2 on bad usage.
func TestCLIHealthcheck(t *testing.T) {
	var status = http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	if code, stdout, stderr := runCLI("healthcheck", "-url", srv.URL+"/healthz"); code != 0 || stdout != "" || stderr != "" {
		t.Errorf("healthy: exit %d, stdout %q, stderr %q; want 0 and nothing printed", code, stdout, stderr)
	}
	status = http.StatusServiceUnavailable
	if code, _, stderr := runCLI("healthcheck", "-url", srv.URL+"/healthz"); code != 1 || !strings.Contains(stderr, "gateway: healthcheck: 503 Service Unavailable") {
		t.Errorf("unhealthy: exit %d, stderr %q; want 1 and the status", code, stderr)
	}
	// Nothing listening.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if code, _, stderr := runCLI("healthcheck", "-url", "http://"+addr+"/healthz"); code != 1 || !strings.Contains(stderr, "gateway: healthcheck: ") {
		t.Errorf("refused: exit %d, stderr %q; want 1", code, stderr)
	}
	// A server that never answers: bounded by -timeout.
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hang.Close()
	if code, _, _ := runCLI("healthcheck", "-timeout", "100ms", "-url", "http://"+hang.Addr().String()+"/"); code != 1 {
		t.Errorf("silent server: exit %d, want 1", code)
	}
	for _, args := range [][]string{
		{"healthcheck", "-url", "ftp://x/"},
		{"healthcheck", "-url", "http:///nohost"},
		{"healthcheck", "-timeout", "0s"},
		{"healthcheck", "extra"},
	} {
		if code, _, stderr := runCLI(args...); code != 2 || !strings.Contains(stderr, usage) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and the usage", args, code, stderr)
		}
	}
}

// The probe against the real binary, as Docker runs it.
func TestHealthcheckProbesGateway(t *testing.T) {
	dir := t.TempDir()
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	startGateway(t, serveConfig(t, dir, addr), addr)
	out, err := exec.Command(gatewayBinary(t), "healthcheck", "-url", "http://"+addr+"/healthz").CombinedOutput()
	if err != nil {
		t.Fatalf("healthcheck of a running gateway: %v %s", err, out)
	}
}

// The version is stamped at build time, as the Dockerfile does with its
// VERSION build argument.
func TestVersionStamped(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "gateway")
	out, err := exec.CommandContext(ctx, "go", "build", "-ldflags", "-X github.com/hookgate/hookgate/app.Version=v9.8.7-test",
		"-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err = exec.CommandContext(ctx, bin, "-version").Output()
	if err != nil || !strings.HasPrefix(string(out), "hookgate v9.8.7-test") {
		t.Fatalf("-version of a stamped binary: %q %v", out, err)
	}
}

// The Dockerfile and the compose example keep their promises: the image's
// config from docker/config.yaml, the version from a build argument, the
// HEALTHCHECK by the binary on the port the config listens on, and a stop
// timeout above shutdown_timeout. (CI does not build the image.)
func TestDockerFiles(t *testing.T) {
	dockerfile, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"ARG VERSION=dev",
		`-X github.com/hookgate/hookgate/app.Version=${VERSION}`,
		"COPY docker/config.yaml /etc/hookgate/config.yaml",
		"STOPSIGNAL SIGTERM",
		`CMD ["/usr/local/bin/gateway", "healthcheck", "-url", "http://127.0.0.1:8080/healthz"`,
		`ENTRYPOINT ["/usr/local/bin/gateway", "-config", "/etc/hookgate/config.yaml"]`,
	} {
		if !strings.Contains(string(dockerfile), want) {
			t.Errorf("Dockerfile lacks %s", want)
		}
	}
	data, err := os.ReadFile("../../docker/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(data, func(name string) (string, bool) { return name + "-value-0123456789", true })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "0.0.0.0:8080" {
		t.Errorf("the image listens on %s; the HEALTHCHECK probes 127.0.0.1:8080", cfg.Listen)
	}
	var compose struct {
		Services map[string]struct {
			StopGracePeriod string `yaml:"stop_grace_period"`
		}
	}
	data, err = os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &compose); err != nil {
		t.Fatal(err)
	}
	grace, err := time.ParseDuration(compose.Services["hookgate"].StopGracePeriod)
	if err != nil || grace < cfg.ShutdownTimeout+5*time.Second {
		t.Errorf("compose stop_grace_period %q (%v), want at least shutdown_timeout (%s) + 5s", compose.Services["hookgate"].StopGracePeriod, err, cfg.ShutdownTimeout)
	}
}
