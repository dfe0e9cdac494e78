package gatewaytest

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
)

// ErrProxy is a TCP proxy in front of a NATS server that can send its
// clients a protocol error of its own: nats.go closes a connection for
// good on an -ERR it does not know.
type ErrProxy struct {
	ln       net.Listener
	upstream string

	mu       sync.Mutex
	clients  []*proxied
	accepted int
	hostile  string // sent to every client once its handshake is answered
}

type proxied struct {
	mu     sync.Mutex // one write to the client at a time
	client net.Conn
}

// RunErrProxy proxies a new listener on 127.0.0.1 to upstream (host:port)
// until the test ends.
func RunErrProxy(t testing.TB, upstream string) *ErrProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &ErrProxy{ln: ln, upstream: upstream}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// URL is the proxy's nats:// URL.
func (p *ErrProxy) URL() string { return "nats://" + p.ln.Addr().String() }

// SendErr writes "-ERR '<msg>'\r\n" to every client connected now, and
// says to how many.
func (p *ErrProxy) SendErr(msg string) int {
	p.mu.Lock()
	clients := append([]*proxied(nil), p.clients...)
	p.mu.Unlock()
	n := 0
	for _, c := range clients {
		c.mu.Lock()
		if _, err := c.client.Write([]byte("-ERR '" + msg + "'\r\n")); err == nil {
			n++
		}
		c.mu.Unlock()
	}
	return n
}

// ErrEveryConnection makes the proxy send "-ERR '<msg>'" to each client
// right after the server answered its handshake (the first PONG); an empty
// msg ends that.
func (p *ErrProxy) ErrEveryConnection(msg string) {
	p.mu.Lock()
	p.hostile = msg
	p.mu.Unlock()
}

// Accepted is how many client connections the proxy took.
func (p *ErrProxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

func (p *ErrProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.upstream)
		if err != nil {
			client.Close()
			continue
		}
		c := &proxied{client: client}
		p.mu.Lock()
		p.clients = append(p.clients, c)
		p.accepted++
		hostile := p.hostile
		p.mu.Unlock()
		go func() {
			_, _ = io.Copy(server, client)
			server.Close()
		}()
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := server.Read(buf)
				if n > 0 {
					c.mu.Lock()
					_, werr := client.Write(buf[:n])
					if hostile != "" && bytes.Contains(buf[:n], []byte("PONG\r\n")) {
						_, werr = client.Write([]byte("-ERR '" + hostile + "'\r\n"))
						hostile = ""
					}
					c.mu.Unlock()
					if werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			client.Close()
		}()
	}
}

func (p *ErrProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.clients {
		c.client.Close()
	}
}
