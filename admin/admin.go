// Package admin serves the API under /v1: deliveries, their attempts,
// manual retries, events and routes, and authenticates every /v1 request
// (the task API's included).
//
// Tokens come in two kinds. An operator (api.tokens) sees and acts on
// everything. A task client (tasks.tokens) submits tasks and sees and acts
// on its own only: GET /v1/deliveries lists its task deliveries, a
// delivery of anyone else's is not found for it, and the event and route
// endpoints answer 403 forbidden. Answers are JSON, errors in the common
// shape.
package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
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
	DeliveryByUID(ctx context.Context, uid string) (*store.Delivery, error)
	Attempts(ctx context.Context, deliveryID int64) ([]store.Attempt, error)
	TaskScope(ctx context.Context, id string) (string, error)
	EventStore
}

// Retrier runs a delivery again now.
type Retrier interface {
	Retry(ctx context.Context, id string) (*store.Delivery, error)
	// RetryForTaskClient is Retry asked by a task client, within its
	// token's share of the task workers.
	RetryForTaskClient(ctx context.Context, id string) (*store.Delivery, error)
	Replayer
}

// Engine is what the API asks of the delivery engine.
type Engine interface {
	Retrier
	RouteControl
}

// Caller is who a /v1 request comes from.
type Caller struct {
	// Operator is true for an api.tokens token: it sees and acts on
	// everything. Otherwise the caller is a task client.
	Operator bool
	// Scope owns the tasks the caller submits and scopes its
	// Idempotency-Keys (operators' included): see Scope.
	Scope string
}

type callerKey struct{}

// CallerOf returns the caller the /v1 middleware authenticated; ok is false
// outside it.
func CallerOf(c *fiber.Ctx) (Caller, bool) {
	caller, ok := c.Locals(callerKey{}).(Caller)
	return caller, ok
}

// Scope is the owner recorded for a token's tasks and keys: a hash of
// "Bearer <token>" (the form the owner has been stored in from the start,
// so tasks keep their owner whichever case the client writes the scheme in).
func Scope(token string) string {
	sum := sha256.Sum256([]byte("Bearer " + token))
	return hex.EncodeToString(sum[:12])
}

// BearerToken returns the token of an Authorization header in the Bearer
// scheme. The scheme name is case-insensitive (RFC 9110 section 11.1).
func BearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimLeft(token, " ")
	return token, token != ""
}

// token is a configured token: its hash, compared in constant time, and
// who it makes the caller.
type token struct {
	sum    [sha256.Size]byte
	caller Caller
}

// Handler is the /v1 API.
type Handler struct {
	tokens []token
	store  Store
	engine Engine
	log    *slog.Logger
	// cluster refuses numeric delivery IDs (a row number names a
	// different delivery on each gateway).
	cluster bool
	// listTimeout bounds the store's reads of a list (listTimeout).
	listTimeout time.Duration
}

// listTimeout bounds the reads of GET /v1/events and /v1/deliveries:
// past it the query is interrupted (a filter that matches few rows walks
// the whole receipt-time index) and the list answered 503 list_timeout.
const listTimeout = 10 * time.Second

// New returns the API for operators' and task clients' tokens. With no
// tokens every /v1 request is refused.
func New(operators, taskClients []string, st Store, engine Engine, log *slog.Logger) *Handler {
	h := &Handler{store: st, engine: engine, log: log, listTimeout: listTimeout}
	for _, t := range operators {
		h.tokens = append(h.tokens, token{sha256.Sum256([]byte(t)), Caller{Operator: true, Scope: Scope(t)}})
	}
	for _, t := range taskClients {
		h.tokens = append(h.tokens, token{sha256.Sum256([]byte(t)), Caller{Scope: Scope(t)}})
	}
	return h
}

// ClusterMode makes the API refuse numeric delivery IDs, which name this
// gateway's rows only: in cluster mode a delivery is named by its API ID.
func (h *Handler) ClusterMode(on bool) *Handler {
	h.cluster = on
	return h
}

// Register mounts the API under /v1. The event and route endpoints are
// operators' only.
func (h *Handler) Register(app fiber.Router) {
	registerOpenAPI(app)
	v1 := app.Group("/v1", h.auth)
	v1.Get("/deliveries", h.listDeliveries)
	v1.Get("/deliveries/:id", h.getDelivery)
	v1.Post("/deliveries/:id/retry", h.retryDelivery)
	h.registerBulk(v1)
	h.registerEvents(v1)
	h.registerOutbox(v1)
	v1.Get("/routes", operatorOnly, h.listRoutes)
	v1.Post("/routes/:name/pause", operatorOnly, h.pauseRoute)
	v1.Post("/routes/:name/resume", operatorOnly, h.resumeRoute)
}

// Authorize returns the caller an Authorization header authenticates.
// Every token's hash is compared, in constant time.
func (h *Handler) Authorize(header string) (Caller, bool) {
	tok, ok := BearerToken(header)
	if !ok {
		return Caller{}, false
	}
	sum := sha256.Sum256([]byte(tok))
	found := -1
	for i := range h.tokens {
		eq := subtle.ConstantTimeCompare(sum[:], h.tokens[i].sum[:])
		found = subtle.ConstantTimeSelect(eq, i, found)
	}
	if found < 0 {
		return Caller{}, false
	}
	return h.tokens[found].caller, true
}

func (h *Handler) auth(c *fiber.Ctx) error {
	if len(h.tokens) == 0 {
		return httperror.New(http.StatusUnauthorized, "unauthorized", "the API is disabled: no api.tokens or tasks.tokens configured")
	}
	caller, ok := h.Authorize(c.Get(fiber.HeaderAuthorization))
	if !ok {
		c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="hookgate"`)
		h.log.Warn("api request refused: bad or missing bearer token", "path", c.Path(), "remote", c.IP())
		return httperror.New(http.StatusUnauthorized, "unauthorized", "a valid bearer token is required")
	}
	c.Locals(callerKey{}, caller)
	return c.Next()
}

// operatorOnly refuses task clients.
func operatorOnly(c *fiber.Ctx) error {
	if caller, ok := CallerOf(c); !ok || !caller.Operator {
		return httperror.New(http.StatusForbidden, "forbidden",
			"this endpoint is for operators (api.tokens); a task client reads its tasks and their deliveries only")
	}
	return c.Next()
}

// owns reports whether the caller may see and act on delivery d: an
// operator any, a task client the deliveries of its own tasks.
func (h *Handler) owns(ctx context.Context, caller Caller, d *store.Delivery) (bool, error) {
	if caller.Operator {
		return true, nil
	}
	if d.Route != outbound.TaskRoute || d.Source != store.TaskSource {
		return false, nil
	}
	scope, err := h.store.TaskScope(ctx, d.EventID)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return subtle.ConstantTimeCompare([]byte(scope), []byte(caller.Scope)) == 1, nil
}

var states = map[string]bool{store.StatePending: true, store.StateRetrying: true,
	store.StateSucceeded: true, store.StateDead: true, store.StateFiltered: true}

// ownScanMax bounds the deliveries read to fill one page of a task
// client's list: its page may be shorter than limit, even empty, with a
// next_cursor to go on from.
const ownScanMax = 2000

func (h *Handler) listDeliveries(c *fiber.Ctx) error {
	f := store.DeliveryFilter{
		Route:  c.Query("route"),
		State:  c.Query("state"),
		Source: c.Query("source"),
	}
	if f.State != "" && !states[f.State] {
		return badParam("state", "must be pending, retrying, succeeded, dead or filtered")
	}
	limit, err := intParam(c, "limit", 50)
	if err != nil || limit < 1 || limit > 500 {
		return badParam("limit", "must be a number from 1 to 500")
	}
	if v := c.Query("cursor"); v != "" {
		cur, err := store.ParseDeliveryCursor(v)
		if err != nil {
			return badCursor(err)
		}
		f.After = &cur
	}
	caller, _ := CallerOf(c)
	var ds []store.Delivery
	next := ""
	ctx, cancel := context.WithTimeout(c.UserContext(), h.listTimeout)
	defer cancel()
	if caller.Operator {
		f.Limit = limit + 1 // one more tells whether there is a next page
		ds, err = h.store.ListDeliveries(ctx, f)
		if err != nil {
			return h.listErr(err, "route, state or source")
		}
		if len(ds) > limit {
			ds = ds[:limit]
			next = ds[len(ds)-1].Cursor().String()
		}
	} else if ds, next, err = h.listOwn(ctx, caller, f, limit); err != nil {
		return h.listErr(err, "route, state or source")
	}
	if ds == nil {
		ds = []store.Delivery{}
	}
	return c.JSON(fiber.Map{"data": ds, "next_cursor": next})
}

// listOwn lists a task client's own task deliveries matching f: it reads
// task deliveries in list order, at most ownScanMax of them, and keeps the
// caller's.
func (h *Handler) listOwn(ctx context.Context, caller Caller, f store.DeliveryFilter, limit int) ([]store.Delivery, string, error) {
	if (f.Route != "" && f.Route != outbound.TaskRoute) || (f.Source != "" && f.Source != store.TaskSource) {
		return nil, "", nil // only task deliveries can be the caller's
	}
	f.Route, f.Source = outbound.TaskRoute, ""
	var out []store.Delivery
	scanned := 0
	for {
		f.Limit = min(500, ownScanMax-scanned)
		ds, err := h.store.ListDeliveries(ctx, f)
		if err != nil {
			return nil, "", err
		}
		for i := range ds {
			scanned++
			cur := ds[i].Cursor()
			f.After = &cur
			mine, err := h.owns(ctx, caller, &ds[i])
			if err != nil {
				return nil, "", err
			}
			if !mine {
				continue
			}
			if len(out) == limit { // one more: there is a next page
				return out, out[limit-1].Cursor().String(), nil
			}
			out = append(out, ds[i])
		}
		switch {
		case len(ds) < f.Limit: // read to the end
			return out, "", nil
		case scanned >= ownScanMax:
			return out, f.After.String(), nil
		}
	}
}

// attemptJSON is an attempt as the API shows it.
type attemptJSON struct {
	store.Attempt
	DurationMS int64  `json:"duration_ms"`
	Response   string `json:"response,omitempty"`
}

func (h *Handler) getDelivery(c *fiber.Ctx) error {
	d, err := h.delivery(c)
	if err != nil {
		return err
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

// delivery reads the delivery the path's :id names if the caller may see
// it; one it may not is not found. :id is the delivery's API ID (dl_…) or,
// outside cluster mode, its row number here (as earlier versions showed).
func (h *Handler) delivery(c *fiber.Ctx) (*store.Delivery, error) {
	notFound := httperror.New(http.StatusNotFound, "not_found", "no such delivery")
	ref := c.Params("id")
	var d *store.Delivery
	var err error
	switch {
	case strings.HasPrefix(ref, store.UIDPrefix):
		d, err = h.store.DeliveryByUID(c.UserContext(), ref)
	case digits(ref):
		if h.cluster {
			return nil, httperror.New(http.StatusBadRequest, "invalid_parameter",
				"id "+ref+" is a number: in cluster mode a delivery is named by its id as the API shows it, "+
					store.UIDPrefix+"… (a number names a row of one gateway)")
		}
		id, perr := strconv.ParseInt(ref, 10, 64)
		if perr != nil || id <= 0 {
			return nil, notFound
		}
		d, err = h.store.DeliveryByID(c.UserContext(), id)
	default:
		return nil, notFound
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound
	}
	if err != nil {
		return nil, unavailable(err)
	}
	caller, _ := CallerOf(c)
	mine, err := h.owns(c.UserContext(), caller, d)
	if err != nil {
		return nil, unavailable(err)
	}
	if !mine {
		return nil, notFound
	}
	return d, nil
}

func (h *Handler) retryDelivery(c *fiber.Ctx) error {
	d, err := h.delivery(c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), 10*time.Second)
	defer cancel()
	retry := h.engine.Retry
	if caller, _ := CallerOf(c); !caller.Operator {
		retry = h.engine.RetryForTaskClient
	}
	d, err = retry(ctx, d.UID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return httperror.New(http.StatusNotFound, "not_found", "no such delivery")
	case errors.Is(err, outbound.ErrSucceeded):
		return httperror.New(http.StatusConflict, "already_succeeded", "the delivery already succeeded")
	case errors.Is(err, outbound.ErrUnknownRoute):
		return httperror.New(http.StatusConflict, "route_removed", err.Error())
	case errors.Is(err, outbound.ErrRoundQueued), errors.Is(err, outbound.ErrBusy), errors.Is(err, outbound.ErrRoutePaused):
		return manualRefused(c, err)
	case errors.Is(err, outbound.ErrNotRunning):
		return httperror.New(http.StatusServiceUnavailable, "unavailable", "deliveries are stopping")
	case err != nil:
		return unavailable(err)
	}
	h.log.Info("delivery retried", "delivery_id", d.UID, "route", d.Route, "event_id", d.EventID)
	return c.Status(http.StatusAccepted).JSON(d)
}

// manualRefused answers a retry or replay the engine would not queue:
// 409 round_queued (one is queued for the delivery already), 409
// route_paused, 503 busy (too many are).
func manualRefused(c *fiber.Ctx, err error) error {
	switch {
	case errors.Is(err, outbound.ErrRoundQueued):
		return httperror.New(http.StatusConflict, "round_queued", "a retry or replay of this delivery is queued or running already")
	case errors.Is(err, outbound.ErrRoutePaused):
		return httperror.New(http.StatusConflict, "route_paused", err.Error()+"; resume it first")
	}
	c.Set(fiber.HeaderRetryAfter, "5")
	return httperror.New(http.StatusServiceUnavailable, "busy", "too many retries and replays queued; retry later")
}

func intParam(c *fiber.Ctx, name string, def int) (int, error) {
	v := c.Query(name)
	if v == "" {
		return def, nil
	}
	return strconv.Atoi(v)
}

// badCursor answers a cursor ParseDeliveryCursor or ParseEventCursor
// refused.
func badCursor(err error) error {
	if errors.Is(err, store.ErrOldCursor) {
		return badParam("cursor", "is of an earlier hookgate version (a row number, which differs between gateways): "+
			"list again without a cursor")
	}
	return badParam("cursor", "is not a cursor this API returned")
}

// digits reports whether s is a non-empty string of decimal digits.
func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func badParam(name, msg string) error {
	return httperror.New(http.StatusBadRequest, "invalid_parameter", name+" "+msg)
}

// listErr answers a list's failed read: 503 list_timeout past
// listTimeout (narrow names the list's filters), else store_unavailable.
func (h *Handler) listErr(err error, narrow string) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return httperror.New(http.StatusServiceUnavailable, "list_timeout", fmt.Sprintf(
			"the list did not finish within %s and was stopped: narrow it (%s)", h.listTimeout, narrow))
	}
	return unavailable(err)
}

func unavailable(err error) error {
	return httperror.New(http.StatusServiceUnavailable, "store_unavailable", "the store is unavailable; retry later")
}
