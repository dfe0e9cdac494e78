// Package httperror is the one error shape every hookgate endpoint answers
// with: {"error":{"code":"…","message":"…"}}. Handlers return an *Error and
// the app's error handler renders it.
package httperror

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/gofiber/fiber/v2"
)

// Error is an HTTP error answer.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// New returns an error answered with status, a machine-readable code and a
// human-readable message.
func New(status int, code, message string) *Error {
	return &Error{Status: status, Code: code, Message: message}
}

// Handler renders errors returned by handlers: an *Error as it is, a
// *fiber.Error (e.g. 405 from the router) with a code and a fixed message
// derived from its status (its own message may quote the request), and
// anything else as a 500 that is logged.
func Handler(log *slog.Logger) fiber.ErrorHandler {
	return func(c *fiber.Ctx, err error) error {
		var e *Error
		var fe *fiber.Error
		switch {
		case errors.As(err, &e):
		case errors.As(err, &fe):
			e = &Error{Status: fe.Code, Code: codeFor(fe.Code), Message: messageFor(fe.Code)}
			log.Warn("request refused", "method", c.Method(), "path", c.Path(), "remote", c.IP(),
				"status", fe.Code, "code", e.Code)
		default:
			log.Error("request failed", "method", c.Method(), "path", c.Path(), "err", err)
			e = New(http.StatusInternalServerError, "internal", "internal error")
		}
		return c.Status(e.Status).JSON(fiber.Map{"error": e})
	}
}

// messageFor is the fixed message of a status.
func messageFor(status int) string {
	switch status {
	case http.StatusNotFound:
		return "no such endpoint"
	case http.StatusMethodNotAllowed:
		return "method not allowed here; see the Allow header"
	case http.StatusRequestEntityTooLarge:
		return "request body too large"
	case http.StatusRequestTimeout:
		return "the request was not received in time"
	case http.StatusRequestHeaderFieldsTooLarge:
		return "request headers too large"
	case http.StatusServiceUnavailable:
		return "unavailable; retry later"
	}
	if status >= 500 {
		return "internal error"
	}
	return http.StatusText(status)
}

func codeFor(status int) string {
	switch status {
	case http.StatusRequestEntityTooLarge:
		return "body_too_large"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusMethodNotAllowed:
		return "method_not_allowed"
	case http.StatusBadRequest:
		return "bad_request"
	case http.StatusRequestTimeout:
		return "timeout"
	case http.StatusRequestHeaderFieldsTooLarge:
		return "header_too_large"
	case http.StatusServiceUnavailable:
		return "unavailable"
	}
	if status >= 500 {
		return "internal"
	}
	return "error"
}
