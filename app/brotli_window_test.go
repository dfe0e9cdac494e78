package app

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/andybalholm/brotli"
)

func brotliStream(t *testing.T, lgwin int, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := brotli.NewWriterOptions(&buf, brotli.WriterOptions{Quality: 5, LGWin: lgwin})
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// The window a brotli stream declares is read from its first bits, for
// every window an encoder may choose.
func TestBrotliWindow(t *testing.T) {
	for lgwin := 10; lgwin <= 24; lgwin++ {
		s := brotliStream(t, lgwin, []byte(`{"id":"evt_1"}`))
		if got := brotliWindow(s); got != 1<<lgwin {
			t.Errorf("LGWin %d: window %d, want %d", lgwin, got, 1<<lgwin)
		}
	}
	for _, tc := range []struct {
		header string
		raw    []byte
		want   int
	}{
		{"gzip", []byte{0x1f}, 0},
		{"br", brotliStream(t, 16, nil), 1 << 16},
		{"gzip, br", brotliStream(t, 18, nil), 1 << 18}, // br decoded first
		{"br, gzip", []byte{0x1f}, maxBrotliWindow},     // br inside gzip: the largest
		{"br", nil, maxBrotliWindow},
		{"br, br, br", nil, 0}, // refused by decodeContent
	} {
		if got := decoderRoom(tc.header, tc.raw); got != tc.want {
			t.Errorf("decoderRoom(%q) = %d, want %d", tc.header, got, tc.want)
		}
	}
}

// A brotli body takes its decoder's window in the body budget: a 52-byte
// stream declaring a 16 MiB window (64 MiB of zeros) made the decoder take
// 16 MiB while the budget counted 1 MiB. Here it waits for room the
// budget does not have (503), while a gzip body of the same decoded size
// is decoded (413, too large) and a small window fits (200).
func TestBrotliWindowInBodyBudget(t *testing.T) {
	a := startApp(t, testConfig(t, "http: {body_memory: 18874368}\n")) // 18 MiB
	// Two bodies declaring 1 MiB, half sent, hold 2 MiB of it.
	for range 2 {
		c, err := net.Dial("tcp", a.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n%s", strings.Repeat("a", 600<<10))
	}
	waitFor(t, "2 MiB held", func() (bool, string) {
		n, held := bodyBytesHeld(a)
		return n == 2<<20, "held " + held
	})
	post := func(coding string, body []byte) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+a.Addr()+"/webhooks/stripe", bytes.NewReader(body))
		req.Header.Set("Content-Encoding", coding)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	zeros := make([]byte, 64<<20)
	if got := post("br", brotliStream(t, 24, zeros)); got != http.StatusServiceUnavailable {
		t.Errorf("a brotli body with a 16 MiB window beside 2 MiB held in an 18 MiB budget: %d, want 503", got)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(zeros)
	zw.Close()
	if got := post("gzip", gz.Bytes()); got != http.StatusRequestEntityTooLarge {
		t.Errorf("a gzip body of 64 MiB decoded: %d, want 413", got)
	}
	if got := post("br", brotliStream(t, 16, []byte(`{}`))); got != http.StatusBadRequest && got != http.StatusUnauthorized {
		t.Errorf("a small brotli body with a 64 KiB window: %d, want it decoded and then refused unsigned (400 or 401)", got)
	}
}

// A brotli window that could never fit http.body_memory is refused at
// once, not left to wait for room.
func TestBrotliWindowOverBodyMemory(t *testing.T) {
	a := startApp(t, testConfig(t, "http: {body_memory: 4194304}\n"))
	req, _ := http.NewRequest(http.MethodPost, "http://"+a.Addr()+"/webhooks/stripe",
		bytes.NewReader(brotliStream(t, 24, []byte(`{}`))))
	req.Header.Set("Content-Encoding", "br")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType || !strings.Contains(string(body), "unsupported_content_encoding") {
		t.Errorf("a 16 MiB brotli window with a 4 MiB body_memory: %d %s, want 415 unsupported_content_encoding", resp.StatusCode, body)
	}
}

// readAtMost reads up to limit bytes whole and refuses one more, at every
// size around its buffer's steps.
func TestReadAtMost(t *testing.T) {
	for _, limit := range []int{0, 1, 32<<10 - 1, 32 << 10, 100000} {
		for _, n := range []int{0, limit - 1, limit, limit + 1} {
			if n < 0 {
				continue
			}
			data := bytes.Repeat([]byte{'x'}, n)
			got, err := readAtMost(iotest.OneByteReader(bytes.NewReader(data)), limit)
			switch {
			case n > limit && !errors.Is(err, errTooLarge):
				t.Errorf("limit %d, %d bytes: %v, want errTooLarge", limit, n, err)
			case n <= limit && (err != nil || !bytes.Equal(got, data)):
				t.Errorf("limit %d, %d bytes: %d bytes, %v", limit, n, len(got), err)
			}
		}
	}
}
