// Package gatewaytest holds what hookgate's tests and cmd/bench share: the
// gateway binary run as a subprocess (built once per test binary, started
// under an optional wrapper, waited for, signalled, its log, memory and
// CPU read), an in-process JetStream server with file storage, an
// in-process cluster of them (RunNATSCluster), and polling with a deadline
// in place of sleeps.
package gatewaytest

import (
	"math/rand/v2"
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
	return RunNATSWith(t, server.Options{Port: port, StoreDir: dir})
}

// RunNATSWith is RunNATS with more of the server's options: Host
// defaults to 127.0.0.1 and Port 0 to a free port; JetStream is on,
// signals and logs off.
func RunNATSWith(t testing.TB, opts server.Options) *server.Server {
	t.Helper()
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.Port == 0 {
		opts.Port = -1
	}
	opts.JetStream, opts.NoSigs, opts.NoLog = true, true, true
	srv, err := server.NewServer(&opts)
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

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago
// and that it has not returned before in this process. It is picked
// outside the kernel's ephemeral range, where outgoing connections take
// their local ports and listeners on port 0 theirs: a port from there
// can be taken before the process it is meant for binds it (an embedded
// NATS server lost its port so while its gateway's store started).
func FreePort(t testing.TB) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	lo, hi := portRange()
	for range 10000 {
		port := lo + rand.IntN(hi-lo)
		if portsGiven[port] {
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue // in use
		}
		_ = ln.Close()
		portsGiven[port] = true
		return port
	}
	t.Fatalf("no free port in [%d, %d)", lo, hi)
	return 0
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{} // by FreePort, in this process
)

// portRange is where FreePort picks: [lo, hi), below the kernel's
// ephemeral range (net.ipv4.ip_local_port_range) or else above it.
func portRange() (lo, hi int) {
	eLo, eHi := 32768, 60999 // Linux's default
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if l, err1 := strconv.Atoi(f[0]); err1 == nil {
				if h, err2 := strconv.Atoi(f[1]); err2 == nil {
					eLo, eHi = l, h
				}
			}
		}
	}
	switch {
	case eLo-1024 >= 4096:
		return max(1024, eLo-16384), eLo
	case 65535-eHi >= 4096:
		return eHi + 1, 65536
	}
	return 1024, 65536 // no room outside it: any port
}

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
	return max(IOCounter("wchar"), 0)
}

// IOCounter is one field of /proc/self/io (wchar, write_bytes, …), or -1
// where it cannot be read.
func IOCounter(field string) int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		name, value, ok := strings.Cut(line, ": ")
		if ok && name == field {
			if n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}

// SilentServer listens on 127.0.0.1 and accepts one connection, which it
// sends on accepted and never answers (a server that hangs a client's
// handshake). It closes when the test ends.
func SilentServer(t testing.TB) (addr string, accepted <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			t.Cleanup(func() { c.Close() })
			ch <- c
		}
	}()
	return ln.Addr().String(), ch
}
