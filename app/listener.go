package app

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// connListener bounds and tracks accepted connections.
//
// At most cap(slots) connections are open at once: Accept waits for one to
// close, and new connections wait in the kernel's listen backlog meanwhile,
// while those already open keep being served. An accept that fails for
// want of resources (EMFILE, ENFILE, ENOBUFS, ENOMEM, a connection aborted
// before it was accepted) is retried with backoff, as net/http does, rather
// than returned: fasthttp takes any such error as the end of the server.
//
// It also tracks connections so a shutdown can close those that never sent
// a byte: fasthttp counts a new connection as busy before its first request
// arrives, so a client's spare connection would otherwise hold a graceful
// shutdown until its deadline.
type connListener struct {
	net.Listener
	log    *slog.Logger
	slots  chan struct{} // one per open connection
	closed chan struct{}
	once   sync.Once

	mu    sync.Mutex
	conns map[*trackedConn]struct{}

	// Failed accepts since the last log line about them, and in all.
	failures int
	lastLog  time.Time
	failed   atomic.Int64
}

// newConnListener bounds l to maxConns open connections.
func newConnListener(l net.Listener, maxConns int, log *slog.Logger) *connListener {
	return &connListener{Listener: l, log: log, slots: make(chan struct{}, maxConns),
		closed: make(chan struct{}), conns: map[*trackedConn]struct{}{}}
}

// acceptBackoffMax caps the wait between retries of a failed accept.
const acceptBackoffMax = time.Second

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			tc := &trackedConn{Conn: c, l: l}
			l.mu.Lock()
			l.conns[tc] = struct{}{}
			l.mu.Unlock()
			return tc, nil
		}
		if !temporaryAcceptError(err) {
			<-l.slots
			return nil, err
		}
		delay = min(max(2*delay, 5*time.Millisecond), acceptBackoffMax)
		l.noteFailure(err, delay)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-l.closed:
			t.Stop()
			<-l.slots
			return nil, net.ErrClosed
		}
	}
}

// noteFailure logs failed accepts, at most once every 10s.
func (l *connListener) noteFailure(err error, retry time.Duration) {
	l.failed.Add(1)
	l.failures++
	if time.Since(l.lastLog) < 10*time.Second {
		return
	}
	l.log.Warn("accepting a connection failed; retrying", "err", err, "retry_in", retry,
		"failures", l.failures, "open", len(l.slots)-1)
	l.failures, l.lastLog = 0, time.Now()
}

// temporaryAcceptError reports whether a failed accept may succeed later.
func temporaryAcceptError(err error) bool {
	if errors.Is(err, net.ErrClosed) {
		return false
	}
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.EAGAIN, syscall.EINTR, syscall.EPROTO, syscall.EPERM} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Close stops Accept, including one waiting for a free slot.
func (l *connListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// open is the number of connections open now.
func (l *connListener) open() int { return len(l.slots) }

// closeUnused closes the connections that have not sent a byte yet.
func (l *connListener) closeUnused() {
	if l == nil {
		return // never listened
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.conns {
		if !c.used.Load() {
			c.Conn.Close()
		}
	}
}

type trackedConn struct {
	net.Conn
	l      *connListener
	used   atomic.Bool
	linger atomic.Bool
	once   sync.Once
}

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.used.Store(true)
	}
	return n, err
}

// Lingering bounds: what a refused request may still send once its answer
// is written.
const (
	lingerTime  = 2 * time.Second
	lingerBytes = 256 << 10
)

// lingerOnClose makes Close send its FIN first and then read and discard
// what the client still sends (up to lingerBytes, for up to lingerTime),
// so a client whose body was refused before it was read gets the answer
// rather than a reset.
func (c *trackedConn) lingerOnClose() { c.linger.Store(true) }

func (c *trackedConn) Close() error {
	var err error
	c.once.Do(func() {
		if c.linger.Load() {
			if tc, ok := c.Conn.(*net.TCPConn); ok && tc.CloseWrite() == nil {
				// SetReadDeadline fails only on a closed connection. The
				// copy ends at the deadline, the client's FIN or an error:
				// all the same here, the connection is closed next.
				if tc.SetReadDeadline(time.Now().Add(lingerTime)) == nil {
					_, _ = io.Copy(io.Discard, io.LimitReader(tc, lingerBytes))
				}
			}
		}
		err = c.Conn.Close()
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
		<-c.l.slots
	})
	return err
}

// effectiveMaxConns is configured, lowered if need be to leave room under
// the open-file limit for everything else the process opens (SQLite's
// files, the JetStream store, outbound sockets): a quarter of the limit,
// at least 64 descriptors. nofile is the limit (0: unknown).
func effectiveMaxConns(configured int, nofile uint64) int {
	if nofile == 0 {
		return configured
	}
	reserve := max(64, nofile/4)
	if nofile <= reserve+8 {
		return 8
	}
	return int(min(uint64(configured), nofile-reserve))
}

// openFileLimit is the process's RLIMIT_NOFILE soft limit (0 if unknown).
func openFileLimit() uint64 {
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) != nil || rl.Cur == ^uint64(0) {
		return 0
	}
	return rl.Cur
}
