package app

import (
	"bytes"
	"log/slog"
	"net/http"

	"github.com/gofiber/fiber/v2"

	"github.com/hookgate/hookgate/httperror"
)

// framing refuses a request whose body length is ambiguous (RFC 9112
// §6.3): two Content-Length headers with different values, or a
// Content-Length beside a Transfer-Encoding. The server's parser keeps the
// last Content-Length, where a proxy in front might have used the first.
// Identical repeated Content-Length headers are accepted as one. It runs
// before the body is read, and the connection is closed after the answer.
func framing(log *slog.Logger) fiber.Handler {
	return func(c *fiber.Ctx) error {
		if ambiguousLength(c.Request().Header.RawHeaders()) {
			return refuseUnread(c, log, httperror.New(http.StatusBadRequest, "conflicting_content_length",
				"two different Content-Length headers, or Content-Length with Transfer-Encoding"))
		}
		return c.Next()
	}
}

var (
	contentLength    = []byte("Content-Length")
	transferEncoding = []byte("Transfer-Encoding")
)

// ambiguousLength reads raw header lines ("Name: value\r\n").
func ambiguousLength(raw []byte) bool {
	var first []byte
	lengths, te := 0, false
	for len(raw) > 0 {
		var line []byte
		line, raw, _ = bytes.Cut(raw, []byte("\n"))
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		name = bytes.TrimSpace(name)
		switch {
		case bytes.EqualFold(name, contentLength):
			v := bytes.TrimSpace(value)
			if lengths > 0 && !bytes.Equal(v, first) {
				return true
			}
			first = v
			lengths++
		case bytes.EqualFold(name, transferEncoding):
			te = true
		}
	}
	return lengths > 0 && te
}
