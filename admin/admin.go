// Package admin serves the operator API under /v1: deliveries, their
// attempts, and manual retries. Every endpoint needs a bearer token from
// api.tokens; answers are JSON, errors in the common shape.
package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/hookgate/hookgate/httperror"
	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/store"
)

// Store is what the API reads.
type Store interface {
	ListDeliveries(ctx context.Context, f store.DeliveryFilter) ([]store.Delivery, error)
	DeliveryByID(ctx context.Context, id int64) (*store.Delivery, error)
	Attempts(ctx context.Context, deliveryID int64) ([]store.Attempt, error)
	EventStore
}

// Retrier runs a delivery again now.
type Retrier interface {
	Retry(ctx context.Context, id int64) (*store.Delivery, error)
	Replayer
}

// Engine is what the API asks of the delivery engine.
type Engine interface {
	Retrier
	RouteControl
}

// Handler is the /v1 API.
type Handler struct {
	tokens [][sha256.Size]byte
	store  Store
	engine Engine
	log    *slog.Logger
}

// New returns the API. With no tokens every /v1 request is refused.
func New(tokens []string, st Store, engine Engine, log *slog.Logger) *Handler {
	h := &Handler{store: st, engine: engine, log: log}
	for _, t := range tokens {
		h.tokens = append(h.tokens, sha256.Sum256([]byte(t)))
	}
	return h
}

// Register mounts the API under /v1.
func (h *Handler) Register(app fiber.Router) {
	v1 := app.Group("/v1", h.auth)
	v1.Get("/deliveries", h.listDeliveries)
	v1.Get("/deliveries/:id", h.getDelivery)
	v1.Post("/deliveries/:id/retry", h.retryDelivery)
	h.registerEvents(v1)
	h.registerOutbox(v1)
	v1.Get("/routes", h.listRoutes)
	v1.Post("/routes/:name/pause", h.pauseRoute)
	v1.Post("/routes/:name/resume", h.resumeRoute)
}

// Authorized reports whether an Authorization header carries a configured
// bearer token. Every token is compared, in constant time.
func (h *Handler) Authorized(header string) bool {
	token, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || token == "" {
		return false
	}
	sum := sha256.Sum256([]byte(token))
	match := 0
	for i := range h.tokens {
		match |= subtle.ConstantTimeCompare(sum[:], h.tokens[i][:])
	}
	return match == 1
}

func (h *Handler) auth(c *fiber.Ctx) error {
	if len(h.tokens) == 0 {
		return httperror.New(http.StatusUnauthorized, "unauthorized", "the API is disabled: no api.tokens configured")
	}
	if !h.Authorized(c.Get(fiber.HeaderAuthorization)) {
		c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="hookgate"`)
		h.log.Warn("api request refused: bad or missing bearer token", "path", c.Path(), "remote", c.IP())
		return httperror.New(http.StatusUnauthorized, "unauthorized", "a valid bearer token is required")
	}
	return c.Next()
}

var states = map[string]bool{store.StatePending: true, store.StateRetrying: true,
	store.StateSucceeded: true, store.StateDead: true}

func (h *Handler) listDeliveries(c *fiber.Ctx) error {
	f := store.DeliveryFilter{
		Route:  c.Query("route"),
		State:  c.Query("state"),
		Source: c.Query("source"),
	}
	if f.State != "" && !states[f.State] {
		return badParam("state", "must be pending, retrying, succeeded or dead")
	}
	limit, err := intParam(c, "limit", 50)
	if err != nil || limit < 1 || limit > 500 {
		return badParam("limit", "must be a number from 1 to 500")
	}
	f.Limit = limit + 1 // one more tells whether there is a next page
	if cur := c.Query("cursor"); cur != "" {
		id, err := strconv.ParseInt(cur, 10, 64)
		if err != nil || id < 0 {
			return badParam("cursor", "is not a cursor this API returned")
		}
		f.AfterID = id
	}
	ds, err := h.store.ListDeliveries(c.UserContext(), f)
	if err != nil {
		return unavailable(err)
	}
	next := ""
	if len(ds) > limit {
		ds = ds[:limit]
		next = strconv.FormatInt(ds[len(ds)-1].ID, 10)
	}
	if ds == nil {
		ds = []store.Delivery{}
	}
	return c.JSON(fiber.Map{"data": ds, "next_cursor": next})
}

// attemptJSON is an attempt as the API shows it.
type attemptJSON struct {
	store.Attempt
	DurationMS int64  `json:"duration_ms"`
	Response   string `json:"response,omitempty"`
}

func (h *Handler) getDelivery(c *fiber.Ctx) error {
	id, err := c.ParamsInt("id")
	if err != nil || id <= 0 {
		return httperror.New(http.StatusNotFound, "not_found", "no such delivery")
	}
	d, err := h.store.DeliveryByID(c.UserContext(), int64(id))
	if errors.Is(err, store.ErrNotFound) {
		return httperror.New(http.StatusNotFound, "not_found", "no such delivery")
	}
	if err != nil {
		return unavailable(err)
	}
	as, err := h.store.Attempts(c.UserContext(), d.ID)
	if err != nil {
		return unavailable(err)
	}
	out := make([]attemptJSON, len(as))
	for i, a := range as {
		out[i] = attemptJSON{Attempt: a, DurationMS: a.Duration.Milliseconds(), Response: string(a.Response)}
	}
	return c.JSON(struct {
		*store.Delivery
		AttemptList []attemptJSON `json:"attempt_list"`
	}{d, out})
}

func (h *Handler) retryDelivery(c *fiber.Ctx) error {
	id, err := c.ParamsInt("id")
	if err != nil || id <= 0 {
		return httperror.New(http.StatusNotFound, "not_found", "no such delivery")
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), 10*time.Second)
	defer cancel()
	d, err := h.engine.Retry(ctx, int64(id))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return httperror.New(http.StatusNotFound, "not_found", "no such delivery")
	case errors.Is(err, outbound.ErrSucceeded):
		return httperror.New(http.StatusConflict, "already_succeeded", "the delivery already succeeded")
	case errors.Is(err, outbound.ErrUnknownRoute):
		return httperror.New(http.StatusConflict, "route_removed", err.Error())
	case errors.Is(err, outbound.ErrNotRunning):
		return httperror.New(http.StatusServiceUnavailable, "unavailable", "deliveries are stopping")
	case err != nil:
		return unavailable(err)
	}
	h.log.Info("delivery retried by operator", "delivery_id", d.ID, "route", d.Route, "event_id", d.EventID)
	return c.Status(http.StatusAccepted).JSON(d)
}

func intParam(c *fiber.Ctx, name string, def int) (int, error) {
	v := c.Query(name)
	if v == "" {
		return def, nil
	}
	return strconv.Atoi(v)
}

func badParam(name, msg string) error {
	return httperror.New(http.StatusBadRequest, "invalid_parameter", name+" "+msg)
}

func unavailable(err error) error {
	return httperror.New(http.StatusServiceUnavailable, "store_unavailable", "the store is unavailable; retry later")
}
