package app

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/andybalholm/brotli"
	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/hookgate/hookgate/httperror"
)

// maxCodings is the most content codings one body may carry.
const maxCodings = 2

// decodeContent undoes a body's Content-Encoding (gzip, deflate, br, in
// the reverse of the order listed) before the handlers run, never past
// limit bytes: fiber would otherwise inflate it whole on c.Body(), so a
// 1 MB gzip body could take gigabytes. The handlers see the decoded body
// and no Content-Encoding, as before. Another coding is 415
// unsupported_content_encoding, a decoded body over limit 413
// body_too_large, a corrupt one 400 bad_content_encoding.
func decodeContent(limit int, log *slog.Logger) fiber.Handler {
	return func(c *fiber.Ctx) error {
		req := c.Request()
		enc := contentEncoding(req)
		if len(enc) == 0 {
			return c.Next()
		}
		body, e := decodeBody(enc, req.Body(), limit)
		if e != nil {
			log.Warn("request refused", "method", c.Method(), "path", c.Path(), "remote", c.IP(),
				"status", e.Status, "code", e.Code)
			return e
		}
		req.Header.Del(fiber.HeaderContentEncoding)
		req.SetBodyRaw(body)
		return c.Next()
	}
}

// contentCoded reports whether a request's body carries a content coding.
func contentCoded(c *fiber.Ctx) bool {
	enc := strings.TrimSpace(contentEncoding(c.Request()))
	return len(enc) > 0 && !strings.EqualFold(enc, "identity")
}

// contentEncoding is the request's Content-Encoding, its lines joined as
// one list (RFC 9110 §5.3): "gzip" then "br" on two lines is "gzip, br".
func contentEncoding(req *fasthttp.Request) string {
	lines := req.Header.PeekAll(fiber.HeaderContentEncoding)
	if len(lines) == 1 {
		return string(lines[0])
	}
	return string(bytes.Join(lines, []byte(", ")))
}

var errTooLarge = errors.New("decoded body too large")

func decodeBody(header string, body []byte, limit int) ([]byte, *httperror.Error) {
	codings := strings.Split(header, ",")
	if len(codings) > maxCodings {
		return nil, httperror.New(http.StatusUnsupportedMediaType, "unsupported_content_encoding",
			"at most "+strconv.Itoa(maxCodings)+" content codings")
	}
	for i := len(codings) - 1; i >= 0; i-- {
		var r io.Reader
		var err error
		src := bytes.NewReader(body)
		switch strings.ToLower(strings.TrimSpace(codings[i])) {
		case "identity", "":
			continue
		case "gzip", "x-gzip":
			r, err = gzip.NewReader(src)
		case "deflate":
			r, err = zlib.NewReader(src)
		case "br":
			r = brotli.NewReader(src)
		default:
			return nil, httperror.New(http.StatusUnsupportedMediaType, "unsupported_content_encoding",
				"content coding not supported (gzip, deflate, br)")
		}
		if err == nil {
			body, err = readAtMost(r, limit)
		}
		switch {
		case errors.Is(err, errTooLarge):
			return nil, httperror.New(http.StatusRequestEntityTooLarge, "body_too_large",
				"decoded body is larger than "+strconv.Itoa(limit)+" bytes")
		case err != nil:
			return nil, httperror.New(http.StatusBadRequest, "bad_content_encoding", "body does not match its Content-Encoding")
		}
	}
	return body, nil
}

// readAtMost reads r whole, or fails with errTooLarge past limit bytes.
// Its buffer grows with what was read, doubling, never past limit+1.
func readAtMost(r io.Reader, limit int) ([]byte, error) {
	buf := make([]byte, 0, min(limit+1, 32<<10))
	for {
		if len(buf) == cap(buf) {
			if len(buf) > limit {
				return nil, errTooLarge
			}
			nb := make([]byte, len(buf), min(2*cap(buf), limit+1))
			copy(nb, buf)
			buf = nb
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			if len(buf) > limit {
				return nil, errTooLarge
			}
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
