package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hookgate/hookgate/app"
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// runCLI runs the command line in-process and returns its exit status,
// stdout and stderr.
func runCLI(args ...string) (int, string, string) {
	var stdout, stderr gatewaytest.SyncBuffer
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

const (
	cliStripeSecret = "whsec_cli_stripe_0123456789abcdef"
	cliNATSPass     = "natspass_0123456789"
	cliAPIToken     = "tok_live_0123456789abcdef"
	cliBearer       = "Bearer sk_live_0123456789abcdef"
	cliRouteSecret  = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	cliShortSecret  = "whsec_tiny"
)

const cliConfig = `
log: {level: "${HG_CLI_TEST_LEVEL}"}
nats:
  url: nats://hg:${HG_CLI_TEST_NATS_PASS}@127.0.0.1:4222
sources:
  - name: stripe
    verify: stripe
    secrets: ["${HG_CLI_TEST_STRIPE_SECRET}", ` + cliShortSecret + `]
api:
  tokens: [` + cliAPIToken + `]
routes:
  - name: billing
    sources: [stripe]
    url: https://billing.internal/hooks
    secret: ` + cliRouteSecret + `
    headers:
      Authorization: "` + cliBearer + `"
      X-Team: billing
`

func TestCLICheckConfig(t *testing.T) {
	t.Setenv("HG_CLI_TEST_LEVEL", "debug")
	t.Setenv("HG_CLI_TEST_NATS_PASS", cliNATSPass)
	t.Setenv("HG_CLI_TEST_STRIPE_SECRET", cliStripeSecret)
	path := writeConfig(t, t.TempDir(), cliConfig)

	for _, args := range [][]string{
		{"check-config", "-config", path},
		{"-config", path, "check-config"}, // the flag before the command works too
		{"check-config", "--config=" + path},
	} {
		code, stdout, stderr := runCLI(args...)
		if code != 0 || stderr != "" {
			t.Fatalf("%q: exit %d, stderr:\n%s", args, code, stderr)
		}
		var got config.Config
		if err := yaml.Unmarshal([]byte(stdout), &got); err != nil {
			t.Fatalf("%q: output is not YAML: %v\n%s", args, err, stdout)
		}
		for _, want := range []string{
			"listen: 127.0.0.1:8080\n", // defaults applied
			"data_dir: ./data\n",
			"  timeout: 15s\n",
			"  schedule: [1m, 5m, 30m, 1h, 2h, 4h, 8h, 12h, 12h, 12h, 12h, 12h]\n",
			"  level: debug\n", // ${NAME} expanded
			"  url: nats://hg:****@127.0.0.1:4222\n",
			"whsec_…(33 chars)", // masked, with a hint
			"- '****'",
			"Authorization: Bearer…(31 chars)",
			"X-Team: billing",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("%q: output lacks %q:\n%s", args, want, stdout)
			}
		}
		for _, secret := range []string{cliStripeSecret, cliNATSPass, cliAPIToken, cliBearer, cliRouteSecret, cliShortSecret, "sk_live"} {
			if strings.Contains(stdout, secret) {
				t.Errorf("%q: output shows the secret %q:\n%s", args, secret, stdout)
			}
		}

		// The output is exactly the loaded config, whose YAML is masked.
		loaded, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := yaml.Marshal(loaded)
		var gotTree, wantTree any
		if err := errors.Join(yaml.Unmarshal([]byte(stdout), &gotTree), yaml.Unmarshal(want, &wantTree)); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(gotTree, wantTree) {
			t.Errorf("%q: output is not the masked config:\n%s\nwant\n%s", args, stdout, want)
		}
		if got.Sources[0].Secrets[0].Reveal() != config.MaskSecret(cliStripeSecret) || got.Sources[0].Secrets[1] != "****" ||
			got.API.Tokens[0].Reveal() != config.MaskSecret(cliAPIToken) || got.Routes[0].Secret.Reveal() != config.MaskSecret(cliRouteSecret) ||
			got.Routes[0].Timeout != config.DefaultRouteTimeout {
			t.Errorf("%q: unexpected values: %+v", args, got)
		}
	}
}

func TestCLICheckConfigInvalid(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"unknown key", "sources: [{name: a, verify: none, id_field: id}]\nbogus: 1\n",
			[]string{"gateway: config: bogus: unknown key\n"}},
		{"several problems", "listen: nope\nsources: [{name: a, verify: rot13, secrets: [" + cliStripeSecret + "]}]\n",
			[]string{"gateway: config: listen: must be host:port", "\ngateway: config: sources[0].verify: unknown scheme \"rot13\""}},
		{"unset variable", "sources: [{name: a, verify: stripe, secrets: [\"${HG_CLI_TEST_UNSET_VAR}\"]}]\n",
			[]string{"HG_CLI_TEST_UNSET_VAR is not set"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_")+".yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			code, stdout, stderr := runCLI("check-config", "-config", path)
			if code != 2 || stdout != "" {
				t.Fatalf("exit %d, stdout %q; want exit 2 and no output", code, stdout)
			}
			for _, want := range tt.want {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr %q lacks %q", stderr, want)
				}
			}
			if strings.Contains(stderr, cliStripeSecret) {
				t.Errorf("stderr shows the secret: %q", stderr)
			}
		})
	}

	code, _, stderr := runCLI("check-config", "-config", filepath.Join(dir, "missing.yaml"))
	if code != 2 || !strings.Contains(stderr, "gateway: config: open ") {
		t.Errorf("missing file: exit %d, stderr %q; want 2 and the open error", code, stderr)
	}
}

func TestCLIVersion(t *testing.T) {
	code, stdout, stderr := runCLI("version")
	pattern := fmt.Sprintf(`^hookgate %s(\+[0-9a-f]{1,12}(\.dirty)?)? \(%s, %s/%s\)\n$`,
		regexp.QuoteMeta(app.Version), regexp.QuoteMeta(runtime.Version()), runtime.GOOS, runtime.GOARCH)
	if code != 0 || stderr != "" || !regexp.MustCompile(pattern).MatchString(stdout) {
		t.Errorf("version: exit %d, stdout %q, stderr %q; want 0 and %s", code, stdout, stderr, pattern)
	}

	old := app.Version
	app.Version = "v1.2.3"
	t.Cleanup(func() { app.Version = old })
	if _, stdout, _ := runCLI("version"); !strings.HasPrefix(stdout, "hookgate v1.2.3") {
		t.Errorf("version with app.Version set: %q", stdout)
	}
}

func TestVersionString(t *testing.T) {
	suffix := fmt.Sprintf(" (%s, %s/%s)", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	rev := "0123456789abcdef0123456789abcdef01234567"
	bi := func(settings ...string) *debug.BuildInfo {
		b := &debug.BuildInfo{}
		for i := 0; i+1 < len(settings); i += 2 {
			b.Settings = append(b.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return b
	}
	tests := []struct {
		version string
		bi      *debug.BuildInfo
		want    string
	}{
		{"dev", nil, "hookgate dev"},
		{"dev", bi(), "hookgate dev"},
		{"dev", bi("vcs.revision", rev, "vcs.modified", "false"), "hookgate dev+0123456789ab"},
		{"v1.2.0", bi("vcs.revision", rev, "vcs.modified", "true"), "hookgate v1.2.0+0123456789ab.dirty"},
		{"v1.2.0+meta", bi("vcs.revision", "abc"), "hookgate v1.2.0+meta.abc"},
	}
	for _, tt := range tests {
		if got := versionString(tt.version, tt.bi); got != tt.want+suffix {
			t.Errorf("versionString(%q, %v) = %q, want %q", tt.version, tt.bi, got, tt.want+suffix)
		}
	}
}

func TestCLIUsage(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-h"}, ""},
		{[]string{"--help"}, ""},
		{[]string{"frobnicate"}, `gateway: unknown command "frobnicate"`},
		{[]string{"-nope"}, "flag provided but not defined: -nope"},
		{[]string{"check-config", "-nope"}, "flag provided but not defined: -nope"},
		{[]string{"check-config", "extra"}, `gateway: check-config: unexpected argument "extra"`},
		{[]string{"check-config", "-h"}, ""},
		{[]string{"version", "extra"}, `gateway: version: unexpected argument "extra"`},
	}
	for _, tt := range tests {
		code, stdout, stderr := runCLI(tt.args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, usage) || !strings.Contains(stderr, tt.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and usage on stderr with %q", tt.args, code, stdout, stderr, tt.want)
		}
	}

	code, stdout, stderr := runCLI("help")
	if code != 0 || stdout != usage || stderr != "" {
		t.Errorf("help: exit %d, stdout %q, stderr %q; want 0 and usage on stdout", code, stdout, stderr)
	}
}

// A bad config is refused before anything starts, with exit status 2 and
// one line per problem.
func TestRunBadConfig(t *testing.T) {
	path := writeConfig(t, t.TempDir(), "log: {level: loud}\nsources: [{name: a, verify: none, id_field: id}]\nbogus: 1\n")
	code, stdout, stderr := runCLI("-config", path)
	if code != 2 || stdout != "" || stderr != "gateway: config: bogus: unknown key\n" {
		t.Errorf("exit %d, stdout %q, stderr %q; want 2 and the unknown key", code, stdout, stderr)
	}
	code, _, stderr = runCLI("-config", filepath.Join(t.TempDir(), "none.yaml"))
	if code != 2 || !strings.HasPrefix(stderr, "gateway: config: open ") {
		t.Errorf("missing file: exit %d, stderr %q; want 2", code, stderr)
	}
}

func serveConfig(t *testing.T, dir, addr string) string {
	return writeConfig(t, dir, fmt.Sprintf(`
listen: %q
data_dir: %q
shutdown_timeout: 10s
sources: [{name: a, verify: none, id_field: id}]
`, addr, filepath.Join(dir, "data")))
}

// A gateway that cannot start (its listen address is taken) exits 1.
func TestRunFailsAtRunTime(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	code, stdout, stderr := runCLI("-config", serveConfig(t, dir, ln.Addr().String()))
	if code != 1 || stdout != "" || !strings.Contains(stderr, "gateway failed") {
		t.Errorf("exit %d, stdout %q; want 1 and \"gateway failed\", stderr:\n%s", code, stdout, stderr)
	}
}

// A max_body the broker's max payload cannot carry is a bad config, found
// at start: exit 2, naming both numbers.
func TestRunMaxBodyOverBrokerPayload(t *testing.T) {
	dir := t.TempDir()
	path := writeConfig(t, dir, fmt.Sprintf(`
listen: "127.0.0.1:0"
data_dir: %q
sources: [{name: a, verify: none, id_field: id, max_body: 9437184}]
`, filepath.Join(dir, "data")))
	code, _, stderr := runCLI("-config", path)
	if code != 2 || !strings.Contains(stderr, "sources[0].max_body") || !strings.Contains(stderr, "9437184") ||
		!strings.Contains(stderr, "8388608") {
		t.Errorf("exit %d; want 2 naming sources[0].max_body, 9437184 and 8388608, stderr:\n%s", code, stderr)
	}
}

// check-config refuses what the start refuses for the embedded server's
// max payload, and lets an external server's wait for the start.
func TestCLICheckConfigMaxBodyOverBrokerPayload(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct{ name, yaml, key, size string }{
		{"source", "sources: [{name: a, verify: none, id_field: id, max_body: 9437184}]\n", "sources[0].max_body", "9437184"},
		{"tasks", "tasks: {tokens: [" + cliAPIToken + "], max_body: 7340032}\n", "tasks.max_body", "7340032"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, t.TempDir(), tt.yaml)
			code, stdout, stderr := runCLI("check-config", "-config", path)
			if code != 2 || stdout != "" || !strings.Contains(stderr, tt.key) || !strings.Contains(stderr, tt.size) ||
				!strings.Contains(stderr, "8388608") {
				t.Errorf("exit %d (printed %d bytes); want 2 and nothing printed, naming %s, %s and 8388608, stderr:\n%s",
					code, len(stdout), tt.key, tt.size, stderr)
			}
		})
	}
	path := writeConfig(t, dir, "nats: {url: nats://127.0.0.1:4222}\n"+
		"sources: [{name: a, verify: none, id_field: id, max_body: 9437184}]\n")
	if code, _, stderr := runCLI("check-config", "-config", path); code != 0 {
		t.Errorf("external NATS: exit %d, want 0 (its max payload is known at start), stderr:\n%s", code, stderr)
	}
}

// SIGTERM shuts the gateway down cleanly: exit 0.
func TestRunCleanShutdown(t *testing.T) {
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	path := serveConfig(t, dir, addr)
	var stdout, stderr gatewaytest.SyncBuffer
	done := make(chan int, 1)
	go func() { done <- run([]string{"-config", path}, &stdout, &stderr) }()

	// Once the gateway answers HTTP, serve has installed its signal
	// handler, so SIGTERM does not kill the test binary.
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/")
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case code := <-done:
			t.Fatalf("gateway exited %d:\n%s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway did not start:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 || stdout.String() != "" || !strings.Contains(stderr.String(), "shutting down") {
			t.Errorf("exit %d, stdout %q; want 0 after \"shutting down\", stderr:\n%s", code, stdout.String(), stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("gateway did not stop after SIGTERM:\n%s", stderr.String())
	}
}
