package admin

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"github.com/hookgate/hookgate/httperror"
	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/store"
)

// EventStore is what the event API reads.
type EventStore interface {
	ListEvents(ctx context.Context, f store.EventFilter) ([]store.EventSummary, error)
	GetEvent(ctx context.Context, source, id string) (*store.Event, error)
}

// Replayer delivers a stored event again to the routes that take it now
// (only to route, when not empty).
type Replayer interface {
	Replay(ctx context.Context, source, eventID, route string) ([]*store.Delivery, error)
}

// registerEvents mounts the event API on the authenticated /v1 group.
func (h *Handler) registerEvents(v1 fiber.Router) {
	v1.Get("/events", operatorOnly, h.listEvents)
	v1.Get("/events/:source/:event_id", operatorOnly, h.getEvent)
	v1.Post("/events/:source/:event_id/replay", operatorOnly, h.replayEvent)
}

func (h *Handler) listEvents(c *fiber.Ctx) error {
	// Tasks are read through /v1/tasks, which scopes them to their token.
	f := store.EventFilter{Source: c.Query("source"), Type: c.Query("type"), ExcludeTasks: true}
	since, ok := parseBound(c.Query("since"))
	if !ok {
		return badParam("since", boundMsg)
	}
	f.Since = since
	limit, err := intParam(c, "limit", 50)
	if err != nil || limit < 1 || limit > 500 {
		return badParam("limit", "must be a number from 1 to 500")
	}
	f.Limit = limit + 1 // one more tells whether there is a next page
	if v := c.Query("cursor"); v != "" {
		cur, err := store.ParseEventCursor(v)
		if err != nil {
			return badCursor(err)
		}
		f.After = &cur
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), h.listTimeout)
	defer cancel()
	evs, err := h.store.ListEvents(ctx, f)
	if err != nil {
		return h.listErr(err, "source, type or since")
	}
	next := ""
	if len(evs) > limit {
		evs = evs[:limit]
		next = evs[len(evs)-1].Cursor().String()
	}
	if evs == nil {
		evs = []store.EventSummary{}
	}
	return c.JSON(fiber.Map{"data": evs, "next_cursor": next})
}

// eventJSON is one event with its headers, body and deliveries.
type eventJSON struct {
	store.EventSummary
	Headers json.RawMessage `json:"headers"`
	// Body is the raw body as a string when it is valid UTF-8, else its
	// standard base64 (BodyEncoding says which).
	Body         string           `json:"body"`
	BodyEncoding string           `json:"body_encoding"`
	Deliveries   []store.Delivery `json:"deliveries"`
}

// eventParams reads :source and :event_id (percent-decoded: an event ID may
// hold any character).
func eventParams(c *fiber.Ctx) (source, id string, err error) {
	source, err1 := url.PathUnescape(c.Params("source"))
	id, err2 := url.PathUnescape(c.Params("event_id"))
	// Task events (reserved source) are read through /v1/tasks, which
	// scopes them to their token; here they do not exist.
	if err1 != nil || err2 != nil || source == "" || id == "" || source == store.TaskSource {
		return "", "", httperror.New(http.StatusNotFound, "not_found", "no such event")
	}
	return source, id, nil
}

func (h *Handler) getEvent(c *fiber.Ctx) error {
	source, id, err := eventParams(c)
	if err != nil {
		return err
	}
	ctx := c.UserContext()
	ev, err := h.store.GetEvent(ctx, source, id)
	if errors.Is(err, store.ErrNotFound) {
		return httperror.New(http.StatusNotFound, "not_found", "no such event")
	}
	if err != nil {
		return unavailable(err)
	}
	// An event has one delivery per route: a page of 500 is all of them.
	ds, err := h.store.ListDeliveries(ctx, store.DeliveryFilter{Source: source, EventID: id, Limit: 500})
	if err != nil {
		return unavailable(err)
	}
	if ds == nil {
		ds = []store.Delivery{}
	}
	out := eventJSON{
		EventSummary: store.EventSummary{Seq: ev.Seq, Source: ev.Source, EventID: ev.ID, EventType: ev.Type,
			ContentType: ev.ContentType, Size: int64(len(ev.Body)), ReceivedAt: ev.ReceivedAt, PublishedAt: ev.PublishedAt},
		Headers:      json.RawMessage(ev.Headers),
		Body:         string(ev.Body),
		BodyEncoding: "utf8",
		Deliveries:   ds,
	}
	if !json.Valid(out.Headers) {
		out.Headers = json.RawMessage("{}")
	}
	if !utf8.Valid(ev.Body) {
		out.Body, out.BodyEncoding = base64.StdEncoding.EncodeToString(ev.Body), "base64"
	}
	return c.JSON(out)
}

func (h *Handler) replayEvent(c *fiber.Ctx) error {
	source, id, err := eventParams(c)
	if err != nil {
		return err
	}
	route := c.Query("route")
	ctx, cancel := context.WithTimeout(c.UserContext(), 10*time.Second)
	defer cancel()
	ds, err := h.engine.Replay(ctx, source, id, route)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return httperror.New(http.StatusNotFound, "not_found", "no such event")
	case errors.Is(err, outbound.ErrUnknownRoute):
		return httperror.New(http.StatusNotFound, "unknown_route", "no route "+route+" is configured")
	case errors.Is(err, outbound.ErrNoRoute):
		return httperror.New(http.StatusConflict, "no_matching_route", err.Error())
	case errors.Is(err, outbound.ErrRoundQueued), errors.Is(err, outbound.ErrBusy), errors.Is(err, outbound.ErrRoutePaused):
		return manualRefused(c, err)
	case errors.Is(err, outbound.ErrNotRunning):
		return httperror.New(http.StatusServiceUnavailable, "unavailable", "deliveries are stopping")
	case err != nil:
		return unavailable(err)
	}
	routes := make([]string, len(ds))
	for i, d := range ds {
		routes[i] = d.Route
	}
	h.log.Info("event replayed by operator", "source", source, "event_id", id, "routes", routes)
	return c.Status(http.StatusAccepted).JSON(fiber.Map{"deliveries": ds})
}
