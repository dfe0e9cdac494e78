package app

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v83/webhook"
)

const apiToken = "tok_app_http_test_0123456789"

// exchange sends raw on a new connection and reads one answer. The
// connection is returned open.
func exchange(t *testing.T, addr, raw string) (answer, string, net.Conn) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read the answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return answer{StatusCode: resp.StatusCode, Header: resp.Header, Close: resp.Close}, string(b), c
}

// answer is a response exchange read, its body read and closed.
type answer struct {
	StatusCode int
	Header     http.Header
	Close      bool
}

// errorCode is the code of an error answer ("" if it is not one).
func errorCode(body string) string {
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	json.Unmarshal([]byte(body), &e)
	return e.Error.Code
}

func signedStripe(id string) (body, sig string) {
	b := fmt.Sprintf(`{"id":%q,"type":"invoice.paid"}`, id)
	return b, webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(b), Secret: secret}).Header
}

// A known path with another method is 405 with Allow and the usual error
// shape; an unknown path stays 404.
func TestWrongMethodIs405(t *testing.T) {
	a := startApp(t, testConfig(t, fmt.Sprintf("api: {tokens: [%q]}\n", apiToken)))
	auth := "Authorization: Bearer " + apiToken + "\r\n"
	for _, tc := range []struct {
		req, allow string
		status     int
		code       string
	}{
		{"GET /webhooks/stripe HTTP/1.1\r\nHost: x\r\n\r\n", "POST", 405, "method_not_allowed"},
		{"PUT /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", "POST", 405, "method_not_allowed"},
		{"DELETE /v1/tasks HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n", "POST", 405, "method_not_allowed"},
		{"POST /v1/tasks/task_1 HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: 0\r\n\r\n", "GET", 405, "method_not_allowed"},
		{"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", "GET", 405, "method_not_allowed"},
		{"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n", "", 404, "not_found"},
		{"DELETE /webhooks HTTP/1.1\r\nHost: x\r\n\r\n", "", 404, "not_found"},
	} {
		line, _, _ := strings.Cut(tc.req, "\r\n")
		resp, body, _ := exchange(t, a.Addr(), tc.req)
		if resp.StatusCode != tc.status || errorCode(body) != tc.code {
			t.Errorf("%s: %d %s, want %d %s", line, resp.StatusCode, body, tc.status, tc.code)
		}
		if allow := resp.Header.Get("Allow"); !strings.Contains(allow, tc.allow) || (tc.allow == "" && allow != "") {
			t.Errorf("%s: Allow %q, want it to list %q", line, allow, tc.allow)
		}
	}
}

// Two different Content-Length headers are refused with 400 and the
// connection closed; identical repeated ones are accepted as one.
func TestConflictingContentLength(t *testing.T) {
	a := startApp(t, testConfig(t, ""))
	body, sig := signedStripe("evt_cl_1")
	head := "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nStripe-Signature: " + sig + "\r\n"
	n := len(body)

	resp, ans, c := exchange(t, a.Addr(), head+fmt.Sprintf("Content-Length: %d\r\nContent-Length: %d\r\n\r\n%s", n, n+5, body+"evt_x"))
	if resp.StatusCode != 400 || errorCode(ans) != "conflicting_content_length" {
		t.Fatalf("different lengths: %d %s, want 400 conflicting_content_length", resp.StatusCode, ans)
	}
	if !resp.Close {
		t.Errorf("different lengths: the connection is kept open")
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Errorf("different lengths: the server sent more after its answer")
	}

	resp, ans, _ = exchange(t, a.Addr(), head+"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
	if resp.StatusCode != 400 || errorCode(ans) != "conflicting_content_length" {
		t.Fatalf("length beside chunked: %d %s, want 400 conflicting_content_length", resp.StatusCode, ans)
	}

	resp, ans, _ = exchange(t, a.Addr(), head+fmt.Sprintf("Content-Length: %d\r\ncontent-length:  %d\r\n\r\n%s", n, n, body))
	if resp.StatusCode != 200 || !strings.Contains(ans, `"accepted"`) {
		t.Fatalf("identical lengths: %d %s, want 200 accepted", resp.StatusCode, ans)
	}
}

// Bodies are held within http.body_memory: with room for two 1 MiB bodies,
// a third waits, then gets 503 server_busy with Retry-After; once one
// finishes, bodies are read again. Declared lengths over the limit get 413.
func TestBodyBudget(t *testing.T) {
	a := startApp(t, testConfig(t, fmt.Sprintf("api: {tokens: [%q]}\nhttp: {body_memory: 2097152}\ntasks: {max_body: 65536}\n", apiToken)))
	head := "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nStripe-Signature: t=1,v1=00\r\nContent-Length: 1048576\r\n\r\n"
	part := strings.Repeat("x", 600<<10) // past half: its buffer is the whole 1 MiB
	var holders []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", a.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, head+part); err != nil {
			t.Fatal(err)
		}
		holders = append(holders, c)
	}
	metrics := func() string {
		resp, err := http.Get("http://" + a.Addr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		m, _ := io.ReadAll(resp.Body)
		return string(m)
	}
	waitFor(t, "both holders in the budget", func() (bool, string) {
		n, held := bodyBytesHeld(a)
		return n == 2<<20, "held " + held
	})
	resp, body, _ := exchange(t, a.Addr(), head+part)
	if resp.StatusCode != 503 || errorCode(body) != "server_busy" || resp.Header.Get("Retry-After") == "" || !resp.Close {
		t.Fatalf("a third body: %d %s, Retry-After %q, close %v: want 503 server_busy, a Retry-After, the connection closed",
			resp.StatusCode, body, resp.Header.Get("Retry-After"), resp.Close)
	}
	m := metrics()
	for _, want := range []string{"hookgate_http_body_busy_total 1", "hookgate_http_connections_open "} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics has no %q", want)
		}
	}

	// A small body needs no room in the budget.
	if status, body := postStripe(t, a, "evt_small_beside"); status != 200 {
		t.Fatalf("a small body beside the budget's holders: %d %s", status, body)
	}
	// A holder sends the rest: it is answered (401: the signature is
	// wrong) and gives its room back.
	if _, err := io.WriteString(holders[0], strings.Repeat("x", 1048576-len(part))); err != nil {
		t.Fatal(err)
	}
	holders[0].SetReadDeadline(time.Now().Add(20 * time.Second))
	held, err := http.ReadResponse(bufio.NewReader(holders[0]), nil)
	if err != nil {
		t.Fatalf("the whole 1 MiB body: %v, want 401", err)
	}
	held.Body.Close()
	if held.StatusCode != 401 {
		t.Fatalf("the whole 1 MiB body: %d, want 401", held.StatusCode)
	}
	holders[0].Close()
	big := strings.Repeat("x", 1048576-len(part))
	waitFor(t, "room again", func() (bool, string) {
		resp, body, _ := exchange(t, a.Addr(), head+part+big)
		return resp.StatusCode == 401, fmt.Sprintf("%d %s", resp.StatusCode, body)
	})

	// Over the limit: 413, inbound and tasks alike, as soon as the body
	// starts (here, 10 bytes of it).
	resp, body, _ = exchange(t, a.Addr(), "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Length: 1048577\r\n\r\n0123456789")
	if resp.StatusCode != 413 || errorCode(body) != "body_too_large" {
		t.Errorf("declared over max_body: %d %s, want 413 body_too_large", resp.StatusCode, body)
	}
	taskHead := "POST /v1/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + apiToken + "\r\nIdempotency-Key: k1\r\n"
	resp, body, _ = exchange(t, a.Addr(), taskHead+"Content-Length: 2000000\r\n\r\n"+part)
	if resp.StatusCode != 413 || errorCode(body) != "body_too_large" {
		t.Errorf("task declared over every limit: %d %s, want 413 body_too_large", resp.StatusCode, body)
	}
	resp, body, _ = exchange(t, a.Addr(), taskHead+fmt.Sprintf("Content-Length: %d\r\n\r\n%s", 70000, strings.Repeat("x", 70000)))
	if resp.StatusCode != 413 || errorCode(body) != "body_too_large" {
		t.Errorf("task over tasks.max_body: %d %s, want 413 body_too_large", resp.StatusCode, body)
	}
	chunk := strings.Repeat("x", 0x96000)
	resp, body, _ = exchange(t, a.Addr(), "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"+
		"96000\r\n"+chunk+"\r\n96000\r\n"+chunk+"\r\n0\r\n\r\n")
	if resp.StatusCode != 413 || errorCode(body) != "body_too_large" {
		t.Errorf("chunked over max_body: %d %s, want 413 body_too_large", resp.StatusCode, body)
	}
	// A chunked body within the limit is read whole.
	b, sig := signedStripe("evt_chunked")
	resp, body, _ = exchange(t, a.Addr(), "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nStripe-Signature: "+sig+
		"\r\nTransfer-Encoding: chunked\r\n\r\n"+fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(b), b))
	if resp.StatusCode != 200 {
		t.Errorf("chunked within the limit: %d %s, want 200", resp.StatusCode, body)
	}
}

// A body takes room in the budget as it arrives, not for what it declares:
// senders that trickle (here 40 chunked bodies of 9,000 bytes so far, to
// no endpoint) hold 16 KiB each, and a signed 20 KB webhook still finds
// room in a budget of 1 MiB. Taking the limit up front, the first one
// would have held the whole budget.
func TestBodyBudgetHeldAsBodiesArrive(t *testing.T) {
	a := startApp(t, testConfig(t, "http: {body_memory: 1048576}\n"))
	const senders, sent = 40, 9000
	for range senders {
		c, err := net.Dial("tcp", a.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := fmt.Fprintf(c, "POST /webhooks/nope HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n",
			sent, strings.Repeat("a", sent)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every sender's 16 KiB held", func() (bool, string) {
		n, held := bodyBytesHeld(a)
		return n == senders*16<<10, "held " + held
	})
	if status, body := postPadded(t, a, "evt_beside_tricklers", 20000); status != 200 {
		t.Fatalf("a signed 20 KB webhook beside %d senders that trickle: %d %s, want 200", senders, status, body)
	}
}

// A connection that never sends a request is closed after read_timeout,
// and one that stops in the middle of its body too.
func TestSilentConnectionsClosed(t *testing.T) {
	a := startApp(t, testConfig(t, "http: {read_timeout: 500ms}\n"))
	for _, send := range []string{"", "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat("x", 20000)} {
		c, err := net.Dial("tcp", a.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, send)
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		b, err := io.ReadAll(c) // until the server closes
		if err != nil {
			t.Fatalf("sent %d bytes: the server kept the connection open: %v", len(send), err)
		}
		if len(send) > 0 && !strings.Contains(string(b), "408") {
			t.Errorf("a body cut short: answered %q, want 408", b)
		}
	}
}

// fakeListener fails its first accepts with err, then accepts from a real
// listener.
type fakeListener struct {
	net.Listener
	fails int
	err   error
}

func (f *fakeListener) Accept() (net.Conn, error) {
	if f.fails > 0 {
		f.fails--
		return nil, f.err
	}
	return f.Listener.Accept()
}

// Accept retries what may succeed later (EMFILE and kin) and returns the
// next connection; other errors end it.
func TestAcceptRetriesTemporaryErrors(t *testing.T) {
	real, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer real.Close()
	emfile := &net.OpError{Op: "accept", Net: "tcp", Err: &osSyscallError{syscall.EMFILE}}
	l := newConnListener(&fakeListener{Listener: real, fails: 5, err: emfile}, 4, slog.New(slog.DiscardHandler))
	go func() {
		if c, err := net.Dial("tcp", real.Addr().String()); err == nil {
			defer c.Close()
			time.Sleep(5 * time.Second)
		}
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatalf("Accept after EMFILE: %v", err)
	}
	c.Close()
	if l.open() != 0 {
		t.Errorf("%d connections counted open after Close", l.open())
	}

	bad := newConnListener(&fakeListener{Listener: real, fails: 1, err: errors.New("boom")}, 4, slog.New(slog.DiscardHandler))
	if _, err := bad.Accept(); err == nil {
		t.Fatal("Accept hid a permanent error")
	}
}

type osSyscallError struct{ errno syscall.Errno }

func (e *osSyscallError) Error() string { return "accept4: " + e.errno.Error() }
func (e *osSyscallError) Unwrap() error { return e.errno }

// At the limit, Accept waits until a connection closes; Close ends a
// waiting Accept.
func TestAcceptWaitsAtTheLimit(t *testing.T) {
	real, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newConnListener(real, 2, slog.New(slog.DiscardHandler))
	defer l.Close()
	for range 3 {
		c, err := net.Dial("tcp", real.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Accept(); err != nil {
		t.Fatal(err)
	}
	third := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			c.Close()
		}
		third <- err
	}()
	select {
	case err := <-third:
		t.Fatalf("a third Accept returned (%v) with 2 of 2 connections open", err)
	case <-time.After(200 * time.Millisecond):
	}
	first.Close()
	select {
	case err := <-third:
		if err != nil {
			t.Fatalf("the third Accept: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the third Accept still waits after a connection closed")
	}

	// Close ends an Accept waiting for a slot.
	waiting := make(chan error, 1)
	go func() {
		_, err := l.Accept()
		waiting <- err
	}()
	l.Close()
	select {
	case err := <-waiting:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not end a waiting Accept")
	}
}

func TestEffectiveMaxConns(t *testing.T) {
	for _, tc := range []struct {
		configured int
		nofile     uint64
		want       int
	}{
		{4096, 0, 4096},
		{4096, 1 << 20, 4096},
		{4096, 1024, 768},
		{4096, 256, 192},
		{100, 256, 100},
		{4096, 60, 8},
	} {
		if got := effectiveMaxConns(tc.configured, tc.nofile); got != tc.want {
			t.Errorf("effectiveMaxConns(%d, %d) = %d, want %d", tc.configured, tc.nofile, got, tc.want)
		}
	}
}

// A coded body is decoded before the handlers (as fiber did), within the
// limit; other codings and corrupt bodies are refused.
func TestContentEncoding(t *testing.T) {
	a := startApp(t, testConfig(t, ""))
	gz, zl := gzipped, zlibbed
	send := func(enc string, body []byte, sig string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+a.Addr()+"/webhooks/stripe", bytes.NewReader(body))
		req.Header.Set("Content-Encoding", enc)
		req.Header.Set("Stripe-Signature", sig)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	b, sig := signedStripe("evt_gzip")
	if status, body := send("gzip", gz([]byte(b)), sig); status != 200 || !strings.Contains(body, `"accepted"`) {
		t.Errorf("gzip: %d %s, want 200 accepted", status, body)
	}
	b, sig = signedStripe("evt_deflate")
	if status, body := send("deflate", zl([]byte(b)), sig); status != 200 {
		t.Errorf("deflate: %d %s, want 200", status, body)
	}
	b, sig = signedStripe("evt_two")
	if status, body := send("deflate, gzip", gz(zl([]byte(b))), sig); status != 200 {
		t.Errorf("deflate then gzip: %d %s, want 200", status, body)
	}
	for _, tc := range []struct {
		enc    string
		body   []byte
		status int
		code   string
	}{
		{"gzip", gz(make([]byte, 2<<20)), 413, "body_too_large"},
		{"gzip", []byte("not gzip at all"), 400, "bad_content_encoding"},
		{"zstd", []byte("x"), 415, "unsupported_content_encoding"},
		{"gzip, gzip, gzip", []byte("x"), 415, "unsupported_content_encoding"},
	} {
		if status, body := send(tc.enc, tc.body, sig); status != tc.status || errorCode(body) != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.enc, status, body, tc.status, tc.code)
		}
	}
}

// pacedReader gives left bytes, 32 KiB every 2 ms.
type pacedReader struct{ left int }

func (p *pacedReader) Read(b []byte) (int, error) {
	if p.left == 0 {
		return 0, io.EOF
	}
	time.Sleep(2 * time.Millisecond)
	n := min(len(b), p.left, 32<<10)
	p.left -= n
	return n, nil
}

// Bodies that arrive together, more than the budget holds, wait for each
// other's room in turn: none is refused. (A body waiting for more room
// while holding part would wait for the others doing the same.)
func TestBodyBudgetNoHoldAndWait(t *testing.T) {
	const limit = 1 << 20
	b := newBodyBudget(4*limit, limit, slog.New(slog.NewTextHandler(io.Discard, nil)))
	// Bodies that held and waited would wait for each other until b.wait;
	// a long wait keeps a slow machine from failing the test.
	b.wait = 30 * time.Second
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			room := &reservation{b: b}
			_, err := readBody(&pacedReader{left: limit}, limit, limit, room.grow)
			room.release()
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Errorf("a 1 MiB body beside 7 others in a 4 MiB budget: %v", err)
		}
	}
	if got := b.held.Load(); got != 0 {
		t.Fatalf("%d bytes still held after every body", got)
	}
}

// bodyBytesHeld reads hookgate_http_body_bytes_held from /metrics: its
// value, and its text ("" when it could not be read).
func bodyBytesHeld(a *App) (float64, string) {
	resp, err := http.Get("http://" + a.Addr() + "/metrics")
	if err != nil {
		return -1, ""
	}
	defer resp.Body.Close()
	m, _ := io.ReadAll(resp.Body)
	_, held, _ := strings.Cut(string(m), "\nhookgate_http_body_bytes_held ")
	held, _, _ = strings.Cut(held, "\n")
	n, err := strconv.ParseFloat(held, 64)
	if err != nil {
		return -1, held
	}
	return n, held
}

// Content-Encoding given on several lines is one list (RFC 9110 §5.3), as
// if on one line: the body decoded by the first line alone would be
// another body than a proxy in front that reads them all decoded.
func TestContentEncodingLinesAreOneList(t *testing.T) {
	a := startApp(t, testConfig(t, ""))
	gz, zl := gzipped, zlibbed
	send := func(lines []string, body []byte, sig string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+a.Addr()+"/webhooks/stripe", bytes.NewReader(body))
		req.Header["Content-Encoding"] = lines
		req.Header.Set("Stripe-Signature", sig)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	b, sig := signedStripe("evt_lines")
	if status, body := send([]string{"deflate", "gzip"}, gz(zl([]byte(b))), sig); status != 200 || !strings.Contains(body, `"accepted"`) {
		t.Errorf("deflate, then gzip on its own line: %d %s, want 200 accepted", status, body)
	}
	b, sig = signedStripe("evt_identity_first")
	if status, body := send([]string{"identity", "gzip"}, gz([]byte(b)), sig); status != 200 || !strings.Contains(body, `"accepted"`) {
		t.Errorf("identity, then gzip on its own line: %d %s, want 200 accepted", status, body)
	}
	if status, body := send([]string{"gzip", "gzip", "gzip"}, []byte("x"), sig); status != 415 || errorCode(body) != "unsupported_content_encoding" {
		t.Errorf("gzip on three lines: %d %s, want 415 unsupported_content_encoding", status, body)
	}
}

// gzipped and zlibbed are b coded as a Content-Encoding gzip or deflate.
func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

func zlibbed(b []byte) []byte {
	var buf bytes.Buffer
	zw := zlib.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}
