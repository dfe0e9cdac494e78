package admin

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/gofiber/fiber/v2"

	"github.com/hookgate/hookgate/httperror"
	"github.com/hookgate/hookgate/store"
)

// ParkedStore lists the events the broker refused for their content, and
// puts one back in the outbox.
type ParkedStore interface {
	Parked(ctx context.Context, after int64, limit int) ([]store.ParkedEvent, error)
	Unpark(ctx context.Context, seq int64) error
}

// registerOutbox mounts the parked-events API on the authenticated /v1
// group, when the store keeps parked events.
func (h *Handler) registerOutbox(v1 fiber.Router) {
	ps, ok := h.store.(ParkedStore)
	if !ok {
		return
	}
	v1.Get("/outbox/parked", operatorOnly, func(c *fiber.Ctx) error { return listParked(c, ps) })
	v1.Post("/outbox/parked/:seq/requeue", operatorOnly, func(c *fiber.Ctx) error { return h.requeueParked(c, ps) })
}

// listParked answers the parked events in intake order, paged by seq.
func listParked(c *fiber.Ctx, ps ParkedStore) error {
	limit, err := intParam(c, "limit", 50)
	if err != nil || limit < 1 || limit > 500 {
		return badParam("limit", "must be a number from 1 to 500")
	}
	var after int64
	if cur := c.Query("cursor"); cur != "" {
		if after, err = strconv.ParseInt(cur, 10, 64); err != nil || after < 0 {
			return badParam("cursor", "is not a cursor this API returned")
		}
	}
	evs, err := ps.Parked(c.UserContext(), after, limit+1)
	if err != nil {
		return unavailable(err)
	}
	next := "" // as the other lists: "" on the last page
	if len(evs) > limit {
		evs = evs[:limit]
		next = strconv.FormatInt(evs[limit-1].Seq, 10)
	}
	return c.JSON(fiber.Map{"data": evs, "next_cursor": next})
}

// requeueParked puts a parked event back in the outbox (e.g. once the
// broker's max payload was raised); the relay publishes it within its
// poll interval.
func (h *Handler) requeueParked(c *fiber.Ctx, ps ParkedStore) error {
	seq, err := strconv.ParseInt(c.Params("seq"), 10, 64)
	if err != nil || seq <= 0 {
		return httperror.New(http.StatusNotFound, "not_found", "no such parked event")
	}
	if err := ps.Unpark(c.UserContext(), seq); errors.Is(err, store.ErrNotFound) {
		return httperror.New(http.StatusNotFound, "not_found", "no such parked event")
	} else if err != nil {
		return unavailable(err)
	}
	h.log.Info("parked event put back in the outbox by an operator", "seq", seq)
	return c.Status(http.StatusAccepted).JSON(fiber.Map{"seq": seq, "state": "queued"})
}
