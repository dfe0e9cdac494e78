package admin

import (
	"context"
	"errors"
	"net/http"

	"github.com/gofiber/fiber/v2"

	"github.com/hookgate/hookgate/httperror"
	"github.com/hookgate/hookgate/outbound"
)

// RouteControl shows and pauses routes.
type RouteControl interface {
	Routes(ctx context.Context) []outbound.RouteStatus
	Pause(name string) error
	Resume(name string) error
}

func (h *Handler) listRoutes(c *fiber.Ctx) error {
	return c.JSON(fiber.Map{"data": h.engine.Routes(c.UserContext())})
}

func (h *Handler) pauseRoute(c *fiber.Ctx) error  { return h.setRoute(c, h.engine.Pause) }
func (h *Handler) resumeRoute(c *fiber.Ctx) error { return h.setRoute(c, h.engine.Resume) }

func (h *Handler) setRoute(c *fiber.Ctx, fn func(string) error) error {
	name := c.Params("name")
	if err := fn(name); errors.Is(err, outbound.ErrRouteNotFound) {
		return httperror.New(http.StatusNotFound, "not_found", "no such route")
	} else if err != nil {
		h.log.Error("route pause or resume not recorded", "route", name, "err", err)
		return unavailable(err)
	}
	for _, st := range h.engine.Routes(c.UserContext()) {
		if st.Name == name {
			return c.JSON(st)
		}
	}
	return httperror.New(http.StatusNotFound, "not_found", "no such route")
}
