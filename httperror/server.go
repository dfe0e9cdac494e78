package httperror

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"

	"github.com/valyala/fasthttp"
)

// ServerErrorHandler answers what the HTTP server refuses before any
// handler runs (a malformed request line or header, a bad Content-Length,
// headers too large, a request not received in time). fasthttp's error
// text quotes the raw request, bearer tokens and signatures included, so
// neither the answer nor the log holds it: the answer is a fixed message
// and the log has only the status, the code and the remote address.
// idle reports whether the connection never sent a byte: its timeout is
// logged at debug, not as a refused request.
func ServerErrorHandler(log *slog.Logger, idle func(*fasthttp.RequestCtx) bool) func(*fasthttp.RequestCtx, error) {
	return func(ctx *fasthttp.RequestCtx, err error) {
		e := Classify(err)
		WriteFast(ctx, e)
		if e.Status == http.StatusRequestTimeout && idle != nil && idle(ctx) {
			log.Debug("connection closed: nothing received in time", "remote", ctx.RemoteIP().String())
			return
		}
		log.Warn("request refused", "remote", ctx.RemoteIP().String(), "status", e.Status, "code", e.Code)
	}
}

// Classify maps an error of the HTTP layer to a fixed answer.
func Classify(err error) *Error {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	var broken fasthttp.ErrBrokenChunk
	switch {
	case errors.As(err, &small):
		return New(http.StatusRequestHeaderFieldsTooLarge, "header_too_large", "request headers too large")
	case errors.As(err, &ne) && ne.Timeout():
		return New(http.StatusRequestTimeout, "timeout", "the request was not received in time")
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return New(http.StatusRequestEntityTooLarge, "body_too_large", "request body too large")
	case errors.As(err, &broken):
		return New(http.StatusBadRequest, "bad_chunked_encoding", "malformed chunked body")
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return New(http.StatusBadRequest, "bad_request", "incomplete request")
	}
	return New(http.StatusBadRequest, "bad_request", "malformed request")
}

// WriteFast writes e as the answer of a raw fasthttp request and closes the
// connection after it.
func WriteFast(ctx *fasthttp.RequestCtx, e *Error) {
	ctx.Response.Reset()
	ctx.SetStatusCode(e.Status)
	ctx.SetContentType("application/json")
	b, _ := json.Marshal(map[string]*Error{"error": e})
	ctx.SetBody(b)
	ctx.SetConnectionClose()
}

// Logger is a fasthttp logger writing to log at debug level. It logs only
// the format, never its arguments: they may quote a raw request.
type Logger struct{ Log *slog.Logger }

// Printf logs format alone.
func (l Logger) Printf(format string, _ ...any) {
	l.Log.Debug("http server", "event", format)
}
