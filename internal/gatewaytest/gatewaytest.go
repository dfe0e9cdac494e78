// Package gatewaytest holds what hookgate's tests and cmd/bench share: the
// gateway binary run as a subprocess (built once per test binary, started
// under an optional wrapper, waited for, signalled, its log, memory and
// CPU read), an in-process JetStream server with file storage, an
// in-process cluster of them (RunNATSCluster), and polling with a deadline
// in place of sleeps.
package gatewaytest

import (
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// WaitFor polls cond every 10ms until it holds; after timeout it fails t
// with what it waited for and cond's last state.
func WaitFor(t testing.TB, what string, timeout time.Duration, cond func() (ok bool, state string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// RunNATS starts a JetStream server on 127.0.0.1:port (a free port when
// port is 0) storing under dir, and shuts it down when the test ends.
func RunNATS(t testing.TB, port int, dir string) *server.Server {
	t.Helper()
	if port == 0 {
		port = -1
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true,
		StoreDir: dir, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago and
// that it has not returned before in this process.
func FreePort(t testing.TB) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		if !portsGiven[port] { // the kernel gives a port closed just now again
			portsGiven[port] = true
			return port
		}
	}
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{} // by FreePort, in this process
)

// CPUTime is the CPU (user and system) this process has used. Benchmarks
// report it per operation (cpu-ns/op): on a shared machine it moves less
// with other processes' load than time per operation does.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru) // cannot fail for RUSAGE_SELF
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BytesWritten is the number of bytes this process has passed to write
// calls (wchar in /proc/self/io), 0 where that cannot be read.
func BytesWritten() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	_, rest, _ := strings.Cut(string(b), "wchar: ")
	n, _ := strconv.ParseInt(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]), 10, 64)
	return n
}
