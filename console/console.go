// Package console serves the web console at /console/: server-side HTML
// (html/template, so every value is escaped) with two vendored scripts,
// htmx and uPlot, and our own small console.js, all embedded in the
// binary (no CDN, no build step).
//
// The shell page and the static files are served without a token and
// hold no data. Everything else is an HTML fragment or JSON under
// /console/f/, which the browser fetches with the operator's API token in
// the Authorization header (console.js keeps it in sessionStorage and adds
// it to every request; there is no cookie, so no CSRF). Task clients'
// tokens are refused. Actions (pause, resume, replay, retry) go to the /v1
// API with the same header. Every answer carries a strict
// Content-Security-Policy: scripts and styles from the console's own files
// only, no inline script or style, no framing.
package console

import (
	"context"
	"embed"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/hookgate/hookgate/admin"
	"github.com/hookgate/hookgate/httperror"
	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/store"
)

//go:embed static templates
var files embed.FS

// CSP is the Content-Security-Policy of every console answer.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Store is what the console reads.
type Store interface {
	SearchEvents(ctx context.Context, f store.EventSearch) ([]store.EventSummary, bool, error)
	GetEvent(ctx context.Context, source, id string) (*store.Event, error)
	ListDeliveries(ctx context.Context, f store.DeliveryFilter) ([]store.Delivery, error)
	Attempts(ctx context.Context, deliveryID int64) ([]store.Attempt, error)
}

// Routes reports the routes' state.
type Routes interface {
	Routes(ctx context.Context) []outbound.RouteStatus
}

// Config is what the console needs.
type Config struct {
	// Authorize returns the caller of an Authorization header (the /v1
	// API's check): only operators see the console's data.
	Authorize func(header string) (admin.Caller, bool)
	Store     Store
	Routes    Routes
	Stats     *Stats   // the overview's numbers and charts
	Sources   []string // the configured sources: where an event ID is looked up
	// SearchTimeout bounds a search of events: past it the store's query
	// is interrupted and the search answered 503 search_timeout. Default
	// 10s.
	SearchTimeout time.Duration
	// Searches is the most searches by a body field at once (each holds
	// one of the store's read connections while it reads bodies); another
	// waits for a turn within SearchTimeout. Default 1.
	Searches int
	// Disabled is set when api.tokens is empty: no token opens the
	// console, and its answers say so.
	Disabled bool
}

// defaultSearchTimeout is Config.SearchTimeout's default.
const defaultSearchTimeout = 10 * time.Second

// Console is the web console.
type Console struct {
	cfg      Config
	tmpl     *template.Template
	log      *slog.Logger
	searches chan struct{} // a turn of a search by a body field
}

// New returns the console.
func New(cfg Config, log *slog.Logger) (*Console, error) {
	t, err := template.New("").Funcs(funcs).ParseFS(files, "templates/*.html")
	if err != nil {
		return nil, err
	}
	if cfg.SearchTimeout <= 0 {
		cfg.SearchTimeout = defaultSearchTimeout
	}
	if cfg.Searches <= 0 {
		cfg.Searches = 1
	}
	return &Console{cfg: cfg, tmpl: t, log: log, searches: make(chan struct{}, cfg.Searches)}, nil
}

// Register mounts the console under /console/.
func (c *Console) Register(app fiber.Router) {
	g := app.Group("/console", headers)
	g.Get("/", c.shell)
	g.Get("/static/:file", staticFile)
	f := g.Group("/f", c.auth)
	f.Get("/overview", c.overview)
	f.Get("/routes", c.routes)
	f.Get("/stats.json", c.stats)
	f.Get("/events", c.events)
	f.Get("/event", c.event)
	f.Get("/dead", c.dead)
	f.Get("/tasks", c.tasks)
}

// headers sets the security headers of every console answer.
func headers(c *fiber.Ctx) error {
	c.Set("Content-Security-Policy", CSP)
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	c.Set(fiber.HeaderReferrerPolicy, "no-referrer")
	c.Set(fiber.HeaderXFrameOptions, "DENY")
	return c.Next()
}

func (c *Console) shell(ctx *fiber.Ctx) error {
	ctx.Set(fiber.HeaderCacheControl, "no-cache")
	return c.render(ctx, "shell", nil)
}

var static = func() fs.FS {
	sub, err := fs.Sub(files, "static")
	if err != nil {
		panic(err)
	}
	return sub
}()

var staticTypes = map[string]string{
	".js":  "text/javascript; charset=utf-8",
	".css": "text/css; charset=utf-8",
	".txt": "text/plain; charset=utf-8",
	".md":  "text/plain; charset=utf-8",
}

func staticFile(c *fiber.Ctx) error {
	name := c.Params("file")
	typ, ok := staticTypes[path.Ext(name)]
	if !ok || strings.ContainsAny(name, "/\\") {
		return httperror.New(http.StatusNotFound, "not_found", "no such file")
	}
	b, err := fs.ReadFile(static, name)
	if err != nil {
		return httperror.New(http.StatusNotFound, "not_found", "no such file")
	}
	c.Set(fiber.HeaderContentType, typ)
	// The vendored files carry their version in their name; ours change
	// with the binary.
	c.Set(fiber.HeaderCacheControl, "no-cache")
	return c.Send(b)
}

// auth lets operators through; the shell shows the login form again on a
// 401.
func (c *Console) auth(ctx *fiber.Ctx) error {
	ctx.Set(fiber.HeaderCacheControl, "no-store")
	if c.cfg.Disabled {
		return httperror.New(http.StatusUnauthorized, "unauthorized", "the console is disabled: no api.tokens configured")
	}
	caller, ok := c.cfg.Authorize(ctx.Get(fiber.HeaderAuthorization))
	if !ok {
		ctx.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="hookgate"`)
		c.log.Warn("console request refused: bad or missing bearer token", "path", ctx.Path(), "remote", ctx.IP())
		return httperror.New(http.StatusUnauthorized, "unauthorized", "a valid bearer token is required")
	}
	if !caller.Operator {
		return httperror.New(http.StatusForbidden, "forbidden", "the console is for operators (api.tokens)")
	}
	return ctx.Next()
}

func (c *Console) render(ctx *fiber.Ctx, name string, data any) error {
	var b strings.Builder
	if err := c.tmpl.ExecuteTemplate(&b, name, data); err != nil {
		c.log.Error("console template", "template", name, "err", err)
		return httperror.New(http.StatusInternalServerError, "internal", "the page could not be drawn")
	}
	ctx.Set(fiber.HeaderContentType, fiber.MIMETextHTMLCharsetUTF8)
	return ctx.SendString(b.String())
}
