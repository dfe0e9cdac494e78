package app

import (
	"bytes"
	"compress/gzip"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// ambiguousLength never panics, and a header block with at most one
// Content-Length and no Transfer-Encoding is never ambiguous.
func FuzzAmbiguousLength(f *testing.F) {
	for _, s := range []string{
		"Host: x\r\nContent-Length: 5\r\n\r\n",
		"Content-Length: 5\r\ncontent-length: 6\r\n\r\n",
		"Content-Length: 5\r\nContent-Length:  5 \r\n\r\n",
		"Transfer-Encoding: chunked\r\nContent-Length: 1\r\n",
		"Content-Length 5\r\n:\r\n\n\n",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got := ambiguousLength(raw)
		lower := strings.ToLower(string(raw))
		if got && strings.Count(lower, "content-length") < 2 && !strings.Contains(lower, "transfer-encoding") {
			t.Fatalf("ambiguous with one Content-Length and no Transfer-Encoding: %q", raw)
		}
	})
}

// decodeBody never panics, never returns more than the limit, and gives
// back what was gzipped.
func FuzzDecodeBody(f *testing.F) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(`{"id":"evt_1"}`))
	zw.Close()
	f.Add("gzip", gz.Bytes())
	f.Add("deflate, gzip", gz.Bytes())
	f.Add("br", []byte{0x0b, 0x02, 0x80, 0x68, 0x69, 0x03})
	f.Add("identity", []byte("plain"))
	f.Add("zstd", []byte("x"))
	f.Fuzz(func(t *testing.T, enc string, body []byte) {
		const limit = 1 << 16
		if r := decoderRoom(enc, body); r < 0 || r > maxCodings*maxBrotliWindow {
			t.Fatalf("decoderRoom(%q) = %d", enc, r)
		}
		out, e := decodeBody(enc, body, limit)
		if e == nil && len(out) > limit {
			t.Fatalf("decoded %d bytes, over the limit %d", len(out), limit)
		}
		if strings.TrimSpace(strings.ToLower(enc)) == "gzip" && e == nil {
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err != nil {
				t.Fatalf("decodeBody took a body gzip refuses: %v", err)
			}
			want, err := io.ReadAll(zr)
			if err == nil && !bytes.Equal(want, out) {
				t.Fatalf("decoded %q, gzip says %q", out, want)
			}
		}
	})
}

// readBody returns exactly the declared length or an error, never more
// than the limit of a body of unknown length, and asks the budget for at
// most twice what arrived, whatever the reads look like.
func FuzzReadBody(f *testing.F) {
	f.Add([]byte("hello"), 5, false)
	f.Add([]byte("hello"), 10, true)
	f.Add(bytes.Repeat([]byte("x"), 70000), -1, true)
	f.Add([]byte{}, 0, false)
	f.Fuzz(func(t *testing.T, data []byte, cl int, oneByte bool) {
		const limit = 1 << 16
		if cl > limit || cl < -1 {
			return
		}
		var r io.Reader = bytes.NewReader(data)
		if oneByte {
			r = iotest.OneByteReader(r)
		}
		if cl >= 0 {
			r = io.LimitReader(r, int64(cl)) // the stream ends at the declared length
		}
		asked := 0
		out, err := readBody(r, cl, limit, func(n int) error { asked = max(asked, n); return nil })
		avail := len(data)
		if cl >= 0 {
			avail = min(avail, cl)
		}
		if asked > max(prefetchBytes, 2*avail) || asked > max(cl, limit) {
			t.Fatalf("cl %d, %d bytes available: asked the budget for %d", cl, avail, asked)
		}
		switch {
		case err != nil:
			if cl >= 0 && len(data) >= cl {
				t.Fatalf("cl %d, %d bytes available: %v", cl, len(data), err)
			}
		case cl >= 0 && len(out) != cl:
			t.Fatalf("cl %d: read %d bytes", cl, len(out))
		case cl < 0 && len(out) > limit:
			t.Fatalf("unknown length: read %d bytes, over the limit", len(out))
		case !bytes.Equal(out, data[:len(out)]):
			t.Fatalf("read bytes that were not sent")
		}
	})
}
