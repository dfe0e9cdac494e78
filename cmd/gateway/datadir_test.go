package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A second gateway on a data_dir in use exits 2 naming the first's pid,
// before it opens anything: no listener, no NATS port, no log of a start.
// Once the first is gone (even killed), the data_dir is free again.
func TestSecondGatewayOnDataDirRefused(t *testing.T) {
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := writeConfig(t, dir, fmt.Sprintf(`
listen: %q
data_dir: %q
sources: [{name: stripe, verify: stripe, secrets: [%q]}]
`, addr, dataDir, secret))
	first := startGateway(t, cfg, addr)

	secondDir := t.TempDir()
	secondAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	natsPort := freePort(t)
	secondCfg := writeConfig(t, secondDir, fmt.Sprintf(`
listen: %q
data_dir: %q
nats: {port: %d}
sources: [{name: stripe, verify: stripe, secrets: [%q]}]
`, secondAddr, dataDir, natsPort, secret))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, gatewayBinary(t), "-config", secondCfg).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("second gateway on the same data_dir was still running after 30 s:\n%s", out)
	}
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("second gateway: %v, want exit status 2\n%s", err, out)
	}
	want := fmt.Sprintf("data_dir %s is in use by pid %d", dataDir, first.Pid())
	if !strings.Contains(string(out), want) {
		t.Fatalf("second gateway said %q, want %q", out, want)
	}
	if strings.Contains(string(out), "level=") {
		t.Fatalf("second gateway logged before refusing (it started something):\n%s", out)
	}
	for _, a := range []string{secondAddr, fmt.Sprintf("127.0.0.1:%d", natsPort)} {
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			c.Close()
			t.Fatalf("the refused gateway left %s listening", a)
		}
	}
	// The first gateway is unharmed.
	if status, what, err := post(http.DefaultClient, addr, "evt_after_refusal"); err != nil || status != 200 || what != "accepted" {
		t.Fatalf("first gateway after the refusal: %d %s %v\n%s", status, what, err, first.Log())
	}

	// A killed gateway leaves its LOCK file behind; the lock itself died
	// with it.
	first.Kill()
	if _, err := os.Stat(filepath.Join(dataDir, "LOCK")); err != nil {
		t.Fatalf("LOCK file: %v", err)
	}
	g := startGateway(t, secondCfg, secondAddr)
	if status, what, err := post(http.DefaultClient, secondAddr, "evt_after_refusal"); err != nil || status != 200 || what != "duplicate" {
		t.Fatalf("gateway on the freed data_dir: %d %s %v\n%s", status, what, err, g.Log())
	}
	g.Kill()
}

// store.path and nats.store_dir may be outside data_dir: a second gateway
// with its own data_dir but the first's SQLite file, or its embedded
// JetStream store, exits 2 naming the first's pid, before it logs or
// opens anything.
func TestSecondGatewayOnSharedStoreRefused(t *testing.T) {
	for _, key := range []string{"store.path", "nats.store_dir"} {
		t.Run(key, func(t *testing.T) {
			shared := filepath.Join(t.TempDir(), "shared")
			cfgFor := func() (cfg, addr string) {
				dir := t.TempDir()
				addr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
				section := fmt.Sprintf("store: {path: %q}", shared)
				if key == "nats.store_dir" {
					section = fmt.Sprintf("nats: {store_dir: %q}", shared)
				}
				return writeConfig(t, dir, fmt.Sprintf(`
listen: %q
data_dir: %q
%s
sources: [{name: stripe, verify: stripe, secrets: [%q]}]
`, addr, filepath.Join(dir, "data"), section, secret)), addr
			}
			firstCfg, firstAddr := cfgFor()
			first := startGateway(t, firstCfg, firstAddr)
			defer first.Kill()

			secondCfg, _ := cfgFor()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, gatewayBinary(t), "-config", secondCfg).CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("second gateway on the same %s was still running after 30 s:\n%s", key, out)
			}
			if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Fatalf("second gateway on the same %s: %v, want exit status 2\n%s", key, err, out)
			}
			want := fmt.Sprintf("%s %s is in use by pid %d", key, shared, first.Pid())
			if !strings.Contains(string(out), want) {
				t.Fatalf("second gateway said %q, want %q", out, want)
			}
			if strings.Contains(string(out), "level=") {
				t.Fatalf("second gateway logged before refusing (it started something):\n%s", out)
			}
			if status, what, err := post(http.DefaultClient, firstAddr, "evt_after_refusal"); err != nil || status != 200 || what != "accepted" {
				t.Fatalf("first gateway after the refusal: %d %s %v\n%s", status, what, err, first.Log())
			}
		})
	}
}

// A gateway whose nats.store_dir is its data_dir (here through a symlink)
// locks data_dir/LOCK once: it does not refuse itself.
func TestStoreDirIsDataDir(t *testing.T) {
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	if err := os.Mkdir(dataDir, 0o750); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(dataDir, link); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := writeConfig(t, dir, fmt.Sprintf(`
listen: %q
data_dir: %q
nats: {store_dir: %q}
sources: [{name: stripe, verify: stripe, secrets: [%q]}]
`, addr, dataDir, link, secret))
	g := startGateway(t, cfg, addr)
	defer g.Kill()
	if status, what, err := post(http.DefaultClient, addr, "evt_one_lock"); err != nil || status != 200 || what != "accepted" {
		t.Fatalf("gateway with nats.store_dir = data_dir: %d %s %v\n%s", status, what, err, g.Log())
	}
}
