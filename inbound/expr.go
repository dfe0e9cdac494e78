package inbound

import (
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"github.com/hookgate/hookgate/expr"
	"github.com/hookgate/hookgate/httperror"
)

// compile compiles the source's id_expr and type_expr (config.Load has
// checked them already).
func (s *source) compile(sc Source) error {
	var err error
	if sc.IDExpr != "" {
		if s.idExpr, err = expr.Compile(sc.IDExpr, expr.Text, expr.All); err != nil {
			return fmt.Errorf("id_expr: %w", err)
		}
	}
	if sc.TypeExpr != "" {
		if s.typeExpr, err = expr.Compile(sc.TypeExpr, expr.Text, expr.Body|expr.Headers|expr.Source); err != nil {
			return fmt.Errorf("type_expr: %w", err)
		}
	}
	return nil
}

// exprProblem is why an expression gave no usable ID or type: an error
// code, its message to the sender, and the log message.
type exprProblem struct{ code, msg, log string }

// maxExprErrLen bounds an evaluation error as answered and logged.
const maxExprErrLen = 200

// evaluate runs the source's type_expr, then its id_expr (which reads the
// type), in place of id and typ. The body is parsed only if one of them
// reads it; the headers are collected only if one reads them. inexact
// marks a result that may hold a U+FFFD the body did not (invalid UTF-8,
// a surrogate escape), for textProblem. An ID that depends on a number
// the body writes with more digits than a double keeps is refused:
// another body's number could give the same ID.
func (s *source) evaluate(c *fiber.Ctx, body []byte, id, typ string, inexact *[2]bool) (string, string, exprProblem) {
	in := expr.Input{Source: s.name, Type: typ}
	var loss expr.Loss
	if s.uses(expr.Body) {
		v, l, err := expr.ParseBody(body)
		if err != nil {
			return "", "", exprProblem{"malformed_json", "body is not valid JSON", "malformed json"}
		}
		in.Body, loss = v, l
	}
	if s.uses(expr.Headers) {
		in.Headers = requestHeaders(c)
	}
	if s.typeExpr != nil {
		t, err := s.typeExpr.Text(&in)
		if err != nil {
			return "", "", exprProblem{"invalid_event_type", "type_expr: " + bounded(err.Error()), "type_expr failed"}
		}
		typ, in.Type = t, t
		inexact[1] = loss.Replaced && strings.ContainsRune(t, utf8.RuneError)
	}
	if s.idExpr != nil {
		v, err := s.idExpr.Text(&in)
		if err != nil {
			return "", "", exprProblem{"invalid_event_id", "id_expr: " + bounded(err.Error()), "id_expr failed"}
		}
		id = v
		inexact[0] = loss.Replaced && strings.ContainsRune(v, utf8.RuneError)
		if loss.Rounded > 0 && s.roundedID(body, &in, v) {
			return "", "", exprProblem{"invalid_event_id",
				"id_expr: the ID depends on a number with more digits than a double keeps; send it as a JSON string, or use id_field",
				"id_expr used a rounded number"}
		}
	}
	return id, typ, exprProblem{}
}

// roundedID reports whether the ID id_expr gave (id, from in) changes
// when the body's numbers that decoding rounded move to the next double:
// two bodies whose numbers differ past a double's digits would then give
// one ID.
func (s *source) roundedID(body []byte, in *expr.Input, id string) bool {
	nudged, err := expr.ParseBodyNudged(body)
	if err != nil {
		return true
	}
	alt := *in
	alt.Body = nudged
	v, err := s.idExpr.Text(&alt)
	return err != nil || v != id
}

// expressions gives id and typ from the source's expressions, if it has
// any; a failure is refused (logged, counted) and its answer returned.
func (h *Handler) expressions(c *fiber.Ctx, src *source, body []byte, id, typ string, inexact *[2]bool, start time.Time) (string, string, error) {
	if src.idExpr == nil && src.typeExpr == nil {
		return id, typ, nil
	}
	id, typ, p := src.evaluate(c, body, id, typ, inexact)
	if p.code != "" {
		h.refuse(c, src.name, OutcomeInvalid, start, p.log, "problem", p.msg)
		return "", "", httperror.New(http.StatusBadRequest, p.code, p.msg)
	}
	return id, typ, nil
}

// uses reports whether an expression of s reads any of vars.
func (s *source) uses(vars expr.Vars) bool {
	return s.idExpr != nil && s.idExpr.Uses(vars) || s.typeExpr != nil && s.typeExpr.Uses(vars)
}

// requestHeaders are the request's headers by lower-case name (the first
// of a repeated one), copied out of fasthttp's buffers.
func requestHeaders(c *fiber.Ctx) map[string]string {
	hs := make(map[string]string, c.Request().Header.Len())
	c.Request().Header.VisitAll(func(k, v []byte) {
		name := strings.ToLower(string(k))
		if _, ok := hs[name]; !ok {
			hs[name] = string(v)
		}
	})
	return hs
}

// bounded is s cut to maxExprErrLen bytes, valid UTF-8.
func bounded(s string) string {
	if len(s) > maxExprErrLen {
		s = s[:maxExprErrLen] + "…"
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
