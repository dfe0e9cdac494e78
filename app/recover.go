package app

import (
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/hookgate/hookgate/httperror"
)

// recoverPanics answers 500 internal to a request whose handler panicked,
// closes its connection and logs the panic with its stack, instead of the
// process stopping: no request may stop the gateway. What the request
// already committed stays committed (an event's claim; its sender's retry
// is then a duplicate). The log has the method and the route's path, cut
// to 256 bytes, never the request's headers or body.
func recoverPanics(next fasthttp.RequestHandler, log *slog.Logger, panics prometheus.Counter) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			panics.Inc()
			path := ctx.Path()
			if len(path) > 256 {
				path = path[:256]
			}
			log.Error("request handler panicked; answered 500", "method", string(ctx.Method()),
				"path", string(path), "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			httperror.WriteFast(ctx, httperror.New(http.StatusInternalServerError, "internal", "internal error"))
		}()
		next(ctx)
	}
}
