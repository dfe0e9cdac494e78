package app

import (
	"net/http"

	"github.com/valyala/fasthttp"

	"github.com/hookgate/hookgate/httperror"
)

// knownMethods answers 501 not_implemented, in the usual error shape, to a
// method the router does not know (which it would answer in plain text).
// A known path with a known but wrong method is the router's 405, with an
// Allow header.
func knownMethods(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		switch string(ctx.Method()) {
		case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete,
			http.MethodConnect, http.MethodOptions, http.MethodTrace, http.MethodPatch:
			next(ctx)
		default:
			httperror.WriteFast(ctx, httperror.New(http.StatusNotImplemented, "not_implemented", "unknown method"))
			if tc, ok := ctx.Conn().(*trackedConn); ok {
				tc.lingerOnClose()
			}
		}
	}
}
