package inbound

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/hookgate/hookgate/httperror"
	"github.com/hookgate/hookgate/store"
)

// nopClaimer accepts every event at once: it isolates the handler from
// the store.
type nopClaimer struct{ seq atomic.Int64 }

func (c *nopClaimer) Claim(_ context.Context, ev *store.Event) (bool, error) {
	ev.Seq = c.seq.Add(1)
	return false, nil
}

// BenchmarkServeStripe is one Stripe-signed 1 KiB request through Fiber's
// router and the handler (verify, find the ID, build the event, answer),
// without the network or the store: its allocs/op are the handler's own.
func BenchmarkServeStripe(b *testing.B) {
	b.Run("id_field", func(b *testing.B) { benchmarkServeStripe(b, "") })
	b.Run("id_expr", func(b *testing.B) { benchmarkServeStripe(b, `body.id + ":" + body.type`) })
}

// benchmarkServeStripe is BenchmarkServeStripe with the Stripe source's
// ID from idExpr, if not empty.
func benchmarkServeStripe(b *testing.B, idExpr string) {
	now := time.Now()
	sources := testSources()
	sources[0].IDExpr = idExpr
	h, err := New(sources, &nopClaimer{}, slog.New(slog.DiscardHandler),
		Options{Metrics: NewMetrics(prometheus.NewRegistry()), Now: func() time.Time { return now }})
	if err != nil {
		b.Fatal(err)
	}
	app := fiber.New(fiber.Config{DisableStartupMessage: true, BodyLimit: h.MaxBody() + 1,
		ErrorHandler: httperror.Handler(slog.New(slog.DiscardHandler))})
	h.Register(app)
	serve := app.Handler()

	type request struct{ body, sig []byte }
	reqs := make([]request, 256)
	pad := strings.Repeat("x", 900)
	for i := range reqs {
		body := []byte(fmt.Sprintf(`{"id":"evt_%024d","object":"event","type":"invoice.paid","data":{"object":{"pad":%q}}}`, i, pad))
		reqs[i] = request{body, []byte(stripeHeader(body, stripeSecret, now)["Stripe-Signature"])}
	}
	var fctx fasthttp.RequestCtx
	fctx.Request.Header.SetMethod(fasthttp.MethodPost)
	fctx.Request.SetRequestURI("/webhooks/stripe")
	fctx.Request.Header.SetContentType("application/json")
	fctx.Request.Header.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
	b.SetBytes(int64(len(reqs[0].body)))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r := &reqs[i%len(reqs)]
		i++
		fctx.Request.Header.SetBytesV("Stripe-Signature", r.sig)
		fctx.Request.SetBodyRaw(r.body)
		fctx.Response.Reset()
		serve(&fctx)
		if fctx.Response.StatusCode() != fasthttp.StatusOK {
			b.Fatalf("status %d: %s", fctx.Response.StatusCode(), fctx.Response.Body())
		}
	}
}
