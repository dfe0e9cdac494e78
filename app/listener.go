package app

import (
	"net"
	"sync"
	"sync/atomic"
)

// connListener tracks accepted connections so a shutdown can close those
// that never sent a byte. fasthttp counts a new connection as busy before
// its first request arrives, so a client's spare connection would otherwise
// hold a graceful shutdown until its deadline.
type connListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[*trackedConn]struct{}
}

func newConnListener(l net.Listener) *connListener {
	return &connListener{Listener: l, conns: map[*trackedConn]struct{}{}}
}

func (l *connListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, l: l}
	l.mu.Lock()
	l.conns[tc] = struct{}{}
	l.mu.Unlock()
	return tc, nil
}

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
	l    *connListener
	used atomic.Bool
	once sync.Once
}

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.used.Store(true)
	}
	return n, err
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
