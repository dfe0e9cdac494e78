package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// The secrets every malformed request below carries; each holds "s3cr3t".
var hostileSecrets = []string{
	"Bearer tok_s3cr3t_bearer_0123456789abcdef",
	"t=1700000000,v1=5f3cr3ts1gnatureabcdef0123456789s3cr3t",
	"v1,s3cr3tStandardWebhooksSignature0123456789=",
	"sha256=s3cr3thubsignature0123456789abcdef",
	"ps3cr3tpath",
}

// secretHeaders is the header block every malformed request carries.
func secretHeaders() string {
	return "Authorization: " + hostileSecrets[0] + "\r\n" +
		"Stripe-Signature: " + hostileSecrets[1] + "\r\n" +
		"webhook-signature: " + hostileSecrets[2] + "\r\n" +
		"X-Hub-Signature-256: " + hostileSecrets[3] + "\r\n"
}

// rawExchange writes req on a new connection to addr and returns what the
// server answered before closing (or before 10s passed).
func rawExchange(t *testing.T, addr, req string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	b, _ := io.ReadAll(c)
	return string(b)
}

// Every kind of request the HTTP layer refuses before a handler sees it,
// each carrying a bearer token and signature headers (and one a secret in
// its request line): the answer is the usual JSON error with a fixed
// message, and neither it nor any log line holds a secret.
func TestMalformedRequestsLeakNoSecret(t *testing.T) {
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := writeConfig(t, dir, fmt.Sprintf(`
listen: %q
data_dir: %q
log: {level: debug}
api: {tokens: ["tok_s3cr3t_bearer_0123456789abcdef"]}
http: {read_timeout: 2s}
sources: [{name: stripe, verify: stripe, secrets: [%q]}]
`, addr, filepath.Join(dir, "data"), secret))
	g := startGateway(t, cfg, addr)

	h := secretHeaders()
	big := strings.Repeat("x", 8<<10)
	chunk := strings.Repeat("x", 0x96000)
	cases := []struct {
		name, req string
		status    int // 0: any refusal
	}{
		{"negative content-length", "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\n" + h + "Content-Length: -1\r\n\r\n{}", 400},
		{"non-numeric content-length", "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\n" + h + "Content-Length: 12abc\r\n\r\n{}", 400},
		{"two content-lengths", "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\n" + h + "Content-Length: 2\r\nContent-Length: 5\r\n\r\n{}abc", 400},
		{"bad request line", "GARBAGE " + hostileSecrets[4] + "\r\nHost: x\r\n" + h + "\r\n", 501},
		{"request line without version", "POST /nowhere\r\n" + h + "\r\n", 404},
		{"bad method", "P\x00ST /webhooks/stripe HTTP/1.1\r\nHost: x\r\n" + h + "\r\n", 501},
		{"unknown method with a body", "BREW /webhooks/stripe HTTP/1.1\r\nHost: x\r\n" + h + "Content-Length: 2\r\n\r\n{}", 501},
		{"header without colon", "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\n" + h + "NoColon " + hostileSecrets[4] + "\r\nContent-Length: 2\r\n\r\n{}", 400},
		{"header too large", "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\n" + h + "X-Big: " + big + "\r\nContent-Length: 2\r\n\r\n{}", 431},
		{"bad chunked encoding", "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\n" + h + "Transfer-Encoding: chunked\r\n\r\nzz\r\n" + hostileSecrets[4] + "\r\n0\r\n\r\n", 400},
		{"chunk too short", "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n5\r\n{}\r\n0\r\n\r\n", 400},
		{"body over the limit", "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\n" + h + "Content-Length: 99999999\r\n\r\n" + big + big, 413},
		{"body cut short", "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\n" + h + "Content-Length: 100\r\n\r\n{}", 400},
		{"headers cut short", "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\n" + h, 400},
		{"bare CR in header", "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\n" + h + "X-A: a\rb\r\nContent-Length: 2\r\n\r\n{}", 0},
		{"content-length beside chunked", "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\n" + h + "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 400},
		{"chunked over the limit", "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n96000\r\n" + chunk + "\r\n96000\r\n" + chunk + "\r\n0\r\n\r\n", 413},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ans := rawExchange(t, addr, tc.req)
			if leaked(ans) {
				t.Errorf("the answer holds a secret:\n%s", ans)
			}
			resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(ans)), nil)
			if err != nil {
				t.Logf("no HTTP answer (%v): %q", err, ans)
				return // the connection was closed: nothing leaked in an answer
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			var e struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Error.Code == "" {
				t.Errorf("answer %d %q is not the JSON error shape", resp.StatusCode, body)
			}
			if tc.status != 0 && resp.StatusCode != tc.status {
				t.Errorf("status %d (%s), want %d", resp.StatusCode, body, tc.status)
			}
		})
	}
	// The gateway still serves.
	if status, what, err := post(http.DefaultClient, addr, "evt_after_hostile"); err != nil || status != 200 {
		t.Fatalf("after the malformed requests: %d %s %v", status, what, err)
	}
	g.Kill()
	out := g.Log()
	for _, line := range strings.Split(out, "\n") {
		if leaked(line) {
			t.Errorf("a log line holds a secret: %s", line)
		}
	}
}

func leaked(s string) bool { return strings.Contains(strings.ToLower(s), "s3cr3t") }

// vmRSS reads the resident set size of pid in bytes.
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	rss, _, err := gatewaytest.Memory(pid)
	if err != nil {
		t.Fatal(err)
	}
	return rss
}

// startLimited runs the binary under `prlimit --nofile=n:n`.
func startLimited(t *testing.T, configPath, addr string, nofile int) *gateway {
	t.Helper()
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("prlimit (util-linux) is not installed")
	}
	return gatewaytest.StartGateway(t, configPath, addr, gatewaytest.GatewayOptions{
		Options: gatewaytest.Options{Wrap: []string{prlimit, fmt.Sprintf("--nofile=%d:%d", nofile, nofile)}}})
}

// keepAliveClient has exactly one connection, kept open.
func keepAliveClient() *http.Client {
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}}
}

// With the open-file limit at 256, more idle connections than that neither
// stop the gateway nor its service to a sender already connected; once the
// idle connections close, new senders are served again.
func TestIdleConnectionsUnderLowFileLimit(t *testing.T) {
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := writeConfig(t, dir, fmt.Sprintf(`
listen: %q
data_dir: %q
sources: [{name: stripe, verify: stripe, secrets: [%q]}]
`, addr, filepath.Join(dir, "data"), secret))
	g := startLimited(t, cfg, addr, 256)

	sender := keepAliveClient()
	if status, what, err := post(sender, addr, "evt_before"); err != nil || status != 200 {
		t.Fatalf("before the idle connections: %d %s %v", status, what, err)
	}

	const idle = 400
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < idle; i++ {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Logf("idle connection %d: %v", i, err)
			break
		}
		conns = append(conns, c)
	}
	t.Logf("%d idle connections open", len(conns))
	// Give the gateway time to accept what it will (the kernel completed
	// every handshake: they are all in its backlog or accepted).
	for i := 0; i < 20; i++ {
		select {
		case <-g.Done():
			t.Fatalf("the gateway exited with %d idle connections open: %v\n%s", len(conns), g.Err(), g.Log())
		case <-time.After(100 * time.Millisecond):
		}
	}
	for i := 0; i < 3; i++ {
		id := fmt.Sprintf("evt_during_%d", i)
		if status, what, err := post(sender, addr, id); err != nil || status != 200 {
			t.Fatalf("the sender already connected, during the idle connections: %d %s %v\n%s", status, what, err, g.Log())
		}
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	fresh := keepAliveClient()
	if status, what, err := post(fresh, addr, "evt_after"); err != nil || status != 200 {
		t.Fatalf("a new sender after the idle connections closed: %d %s %v\n%s", status, what, err, g.Log())
	}
	select {
	case <-g.Done():
		t.Fatalf("the gateway exited: %v\n%s", g.Err(), g.Log())
	default:
	}
	if !strings.Contains(g.Log(), "max_connections") {
		t.Errorf("the log does not give the connection limit in force:\n%s", g.Log())
	}
}

// 2,000 connections each declaring a 1 MiB body and sending 10 bytes every
// 2s keep the whole process under 300 MB RSS, and a normal sender is
// still served meanwhile.
func TestSlowBodiesBoundedMemory(t *testing.T) {
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := writeConfig(t, dir, fmt.Sprintf(`
listen: %q
data_dir: %q
sources: [{name: stripe, verify: stripe, secrets: [%q]}]
`, addr, filepath.Join(dir, "data"), secret))
	g := startGateway(t, cfg, addr)
	pid := g.Pid()
	base := vmRSS(t, pid)

	const n = 2000
	const limit = 300 << 20
	stop := make(chan struct{})
	var wg sync.WaitGroup
	opened := 0
	head := "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nStripe-Signature: t=1,v1=00\r\nContent-Length: 1048576\r\n\r\n"
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		opened++
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			tick := time.NewTicker(2 * time.Second)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := c.Write([]byte("0123456789")); err != nil {
						return
					}
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	t.Logf("%d slow bodies open; RSS before %d MB", opened, base>>20)

	peak := int64(0)
	for i := 0; i < 10; i++ {
		time.Sleep(time.Second)
		select {
		case <-g.Done():
			t.Fatalf("the gateway exited: %v\n%s", g.Err(), g.Log())
		default:
		}
		rss := vmRSS(t, pid)
		peak = max(peak, rss)
		if rss > limit {
			t.Fatalf("RSS %d MB with %d slow bodies, want under %d MB", rss>>20, n, limit>>20)
		}
	}
	if status, what, err := post(keepAliveClient(), addr, "evt_beside_slow"); err != nil || status != 200 {
		t.Fatalf("a normal sender beside the slow bodies: %d %s %v", status, what, err)
	}
	t.Logf("peak RSS %d MB over 10s", peak>>20)
}

// A compressed body is decoded no further than the limit: a 256 KiB gzip
// body of 256 MiB of zeros is refused with 413 and the process's peak RSS
// stays under 300 MB.
func TestCompressedBodyBounded(t *testing.T) {
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := writeConfig(t, dir, fmt.Sprintf(`
listen: %q
data_dir: %q
sources: [{name: stripe, verify: stripe, secrets: [%q]}]
`, addr, filepath.Join(dir, "data"), secret))
	g := startGateway(t, cfg, addr)

	var bomb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&bomb, gzip.BestCompression)
	zeros := make([]byte, 1<<20)
	for range 256 {
		zw.Write(zeros)
	}
	zw.Close()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/webhooks/stripe", bytes.NewReader(bomb.Bytes()))
	req.Header.Set("Content-Encoding", "gzip")
	req.Header.Set("Stripe-Signature", "t=1,v1=00")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 413 || !strings.Contains(string(b), `"body_too_large"`) {
		t.Errorf("a %d-byte gzip bomb: %d %s, want 413 body_too_large", bomb.Len(), resp.StatusCode, b)
	}
	if peak := vmHWM(t, g.Pid()); peak > 300<<20 {
		t.Errorf("peak RSS %d MB after one %d-byte gzip body, want under 300 MB", peak>>20, bomb.Len())
	}
}

// vmHWM reads the peak resident set size of pid in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	_, peak, err := gatewaytest.Memory(pid)
	if err != nil {
		t.Fatal(err)
	}
	return peak
}
