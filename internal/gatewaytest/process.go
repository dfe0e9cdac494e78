package gatewaytest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// GatewayPackage is the import path of the gateway binary.
const GatewayPackage = "github.com/hookgate/hookgate/cmd/gateway"

// Build builds the gateway binary into dir and returns its path. It runs
// `go build` in the current directory, which must be inside the module.
func Build(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "gateway")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, GatewayPackage).CombinedOutput() //nolint:gosec // G204: a test helper building our own package
	if err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", GatewayPackage, err, out)
	}
	return bin, nil
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary builds the gateway once per test binary and returns its path.
// The binary lives in a directory of its own under os.TempDir, shared by
// every test of the binary, so no test's cleanup removes it.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hookgate-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath, buildErr = Build(context.Background(), dir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// WriteConfig writes yaml to dir/config.yaml and returns its path.
func WriteConfig(t testing.TB, dir, yaml string) string {
	t.Helper()
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Options is how Start runs a process.
type Options struct {
	// Wrap is a command the process runs under, e.g. prlimit --nofile=256:256;
	// it must exec the process so that the pid is the process's own.
	Wrap []string
	// LogPath is the file stdout and stderr go to; "" keeps them in memory.
	LogPath string
	// DieWithParent kills the process when the thread that started it
	// exits (Pdeathsig), for programs that may be killed themselves.
	DieWithParent bool
}

// Process is one run of a program as a subprocess.
type Process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	mem     *SyncBuffer // when logPath is ""
	done    chan struct{}
	err     error // Wait's result, once done is closed
}

// Start runs argv (under opts.Wrap) and returns at once; name is used in
// errors.
func Start(name string, argv []string, opts Options) (*Process, error) {
	args := append(append([]string{}, opts.Wrap...), argv...)
	if len(args) == 0 {
		return nil, errors.New("gatewaytest: start: no command")
	}
	p := &Process{name: name, logPath: opts.LogPath, done: make(chan struct{})}
	p.cmd = exec.Command(args[0], args[1:]...) //nolint:gosec // G204: tests and the bench run the binary they built
	var logf *os.File
	if opts.LogPath != "" {
		f, err := os.Create(opts.LogPath)
		if err != nil {
			return nil, err
		}
		logf = f
		p.cmd.Stdout, p.cmd.Stderr = f, f
	} else {
		p.mem = &SyncBuffer{}
		p.cmd.Stdout, p.cmd.Stderr = p.mem, p.mem
	}
	if opts.DieWithParent {
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	err := p.cmd.Start()
	if logf != nil {
		_ = logf.Close() // the child has its own copy; nothing was written here
	}
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	return p, nil
}

// Pid is the process's id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is Wait's result (nil for exit status 0) once Done is closed.
func (p *Process) Err() error {
	<-p.done
	return p.err
}

// ExitCode is the exit status once Done is closed; -1 if a signal ended
// the process.
func (p *Process) ExitCode() int {
	<-p.done
	return p.cmd.ProcessState.ExitCode()
}

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Kill sends SIGKILL and waits for the process to be gone; killing an
// exited process is harmless.
func (p *Process) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Wait waits up to timeout for the process to exit and reports whether it
// did.
func (p *Process) Wait(timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// Stop sends SIGTERM and waits up to timeout for the exit, which it
// returns (Wait's error); a process still running then is killed and an
// error says so.
func (p *Process) Stop(timeout time.Duration) error {
	if p.Exited() {
		return p.err
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if !p.Wait(timeout) {
		p.Kill()
		return fmt.Errorf("%s did not stop within %s; killed", p.name, timeout)
	}
	return p.err
}

// WaitHTTP waits until url answers HTTP (any status), the process exits,
// or timeout passes.
func (p *Process) WaitHTTP(url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	c := &http.Client{Timeout: time.Second}
	for {
		if p.Exited() {
			return fmt.Errorf("%s exited before serving (%w):\n%s", p.name, p.err, p.Tail(15))
		}
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not serving %s after %s: %w\n%s", p.name, url, timeout, err, p.Tail(15))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Log is everything the process wrote to stdout and stderr so far.
func (p *Process) Log() string {
	if p.mem != nil {
		return p.mem.String()
	}
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// Tail is the last n lines of Log.
func (p *Process) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.Log(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Memory is the process's resident set size now and its peak (VmRSS and
// VmHWM in /proc/<pid>/status), in bytes.
func (p *Process) Memory() (rss, peak int64, err error) {
	return Memory(p.Pid())
}

// CPUTime is the user and system CPU the process has used.
func (p *Process) CPUTime() time.Duration { return ProcessCPUTime(p.Pid()) }

// Memory is the resident set size of pid now and its peak (VmRSS and
// VmHWM in /proc/<pid>/status), in bytes.
func Memory(pid int) (rss, peak int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = f.Close() }() // read-only
	found := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s of pid %d: %w", k, pid, err)
		}
		found++
		if k == "VmRSS" {
			rss = n << 10
		} else {
			peak = n << 10
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if found < 2 {
		return 0, 0, fmt.Errorf("no VmRSS or VmHWM in the status of pid %d", pid)
	}
	return rss, peak, nil
}

// ProcessCPUTime is the user and system CPU pid has used (0 if it cannot
// be read), from /proc/<pid>/stat.
func ProcessCPUTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which is in parentheses).
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ is 100 on Linux
}

// Gateway is the gateway binary run by a test.
type Gateway struct {
	*Process
	Addr string // its listen address
}

// GatewayOptions is how StartGateway runs the gateway.
type GatewayOptions struct {
	Options
	// Ready is the path polled until it answers (any status); "" is
	// /healthz.
	Ready string
	// Timeout bounds the wait for Ready; 0 is 30s.
	Timeout time.Duration
}

// StartGateway runs the gateway binary (built once per test binary) on
// configPath, whose listen address is addr, and waits until it answers
// HTTP; it fails t if the gateway exits or does not answer in time. The
// gateway is killed when the test ends.
func StartGateway(t testing.TB, configPath, addr string, opts GatewayOptions) *Gateway {
	t.Helper()
	p, err := Start("gateway", []string{Binary(t), "-config", configPath}, opts.Options)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	ready, timeout := opts.Ready, opts.Timeout
	if ready == "" {
		ready = "/healthz"
	}
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	if err := p.WaitHTTP("http://"+addr+ready, timeout); err != nil {
		t.Fatal(err)
	}
	return &Gateway{Process: p, Addr: addr}
}

// SyncBuffer is a bytes.Buffer safe for writers and readers at once.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

var _ io.Writer = (*SyncBuffer)(nil)

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// RemoveBinary deletes what Binary built; TestMain calls it after m.Run.
func RemoveBinary() {
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath)) // a temporary directory
	}
}
