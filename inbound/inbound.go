// Package inbound serves POST /webhooks/{source}: it verifies the sender's
// signature over the raw body, identifies the event, claims it in the store
// (the durable dedup) and wakes the outbox relay. A 2xx is sent only after
// the event is committed; a repeat of a stored event is answered 200
// "duplicate". Refused requests store nothing.
package inbound

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/httperror"
	"github.com/hookgate/hookgate/signature"
	"github.com/hookgate/hookgate/store"
)

// MaxEventIDLen is the longest accepted event ID.
const MaxEventIDLen = 255

// Claimer stores an event unless it is already stored; see store.Store.Claim.
type Claimer interface {
	Claim(ctx context.Context, ev *store.Event) (dup bool, err error)
}

// Handler is the inbound endpoint for every configured source.
type Handler struct {
	sources map[string]*source
	store   Claimer
	notify  func()
	log     *slog.Logger
	metrics *Metrics
	now     func() time.Time
	maxBody int
}

// source is one configured sender, ready to serve.
type source struct {
	name                 string
	verifier             signature.Verifier
	maxBody              int
	idHeader, typeHeader string
	paths                []string // JSON paths to look up: id field, type field (either may be "")
	needJSON             bool
	keepHeaders          []string
}

// Options are the optional parts of New.
type Options struct {
	// Notify is called after each newly accepted event (wakes the relay).
	Notify func()
	// Metrics, if set, counts requests by source and outcome.
	Metrics *Metrics
	// Now is the clock for signature timestamps. Default time.Now.
	Now func() time.Time
}

// New builds the handler for the configured sources. The sources are
// expected to be validated (config.Load); New still reports bad secrets.
func New(sources []config.Source, st Claimer, log *slog.Logger, opts Options) (*Handler, error) {
	h := &Handler{
		sources: make(map[string]*source, len(sources)),
		store:   st, notify: opts.Notify, log: log, metrics: opts.Metrics, now: opts.Now,
	}
	if h.notify == nil {
		h.notify = func() {}
	}
	if h.now == nil {
		h.now = time.Now
	}
	for i, sc := range sources {
		v, err := newVerifier(sc)
		if err != nil {
			return nil, fmt.Errorf("sources[%d] (%s): %w", i, sc.Name, err)
		}
		src := &source{
			name: sc.Name, verifier: v, maxBody: sc.MaxBody,
			idHeader: sc.IDHeader, typeHeader: sc.TypeHeader,
			paths:    []string{sc.IDField, sc.TypeField},
			needJSON: sc.IDField != "" || sc.TypeField != "",
		}
		if src.maxBody <= 0 {
			src.maxBody = 1 << 20
		}
		src.keepHeaders = keepHeaders(sc)
		h.sources[sc.Name] = src
		h.maxBody = max(h.maxBody, src.maxBody)
	}
	return h, nil
}

func newVerifier(sc config.Source) (signature.Verifier, error) {
	switch sc.Verify {
	case "stripe":
		return signature.NewStripe(sc.Secrets, sc.Tolerance)
	case "standard":
		return signature.NewStandard(sc.Secrets, sc.Tolerance)
	case "github":
		return signature.NewGitHub(sc.Secrets)
	case "hmac":
		return signature.NewHMAC(sc.Secrets, signature.HMACOptions{
			Header: sc.HMAC.Header, Prefix: sc.HMAC.Prefix,
			Algorithm: sc.HMAC.Algorithm, Encoding: sc.HMAC.Encoding,
		})
	case "none":
		return signature.None{}, nil
	}
	return nil, fmt.Errorf("unknown verify scheme %q", sc.Verify)
}

// keepHeaders lists the request headers stored with each event: those that
// identify it and describe the sender, never a signature.
func keepHeaders(sc config.Source) []string {
	hs := []string{"User-Agent"}
	for _, h := range []string{sc.IDHeader, sc.TypeHeader} {
		if h != "" {
			hs = append(hs, h)
		}
	}
	if sc.Verify == "standard" {
		hs = append(hs, "webhook-timestamp")
	}
	return hs
}

// MaxBody is the largest body limit of any source; the HTTP server's own
// limit must be at least this.
func (h *Handler) MaxBody() int { return h.maxBody }

// Register mounts POST /webhooks/:source.
func (h *Handler) Register(r fiber.Router) {
	r.Post("/webhooks/:source", h.serve)
}

// Outcomes of an inbound request, as logged and counted.
const (
	OutcomeAccepted     = "accepted"
	OutcomeDuplicate    = "duplicate"
	OutcomeUnauthorized = "unauthorized"
	OutcomeInvalid      = "invalid"
	OutcomeTooLarge     = "too_large"
	OutcomeUnknown      = "unknown_source"
	OutcomeUnavailable  = "unavailable"
)

func (h *Handler) serve(c *fiber.Ctx) error {
	start := time.Now()
	src, ok := h.sources[c.Params("source")]
	if !ok {
		h.refuse(c, "", OutcomeUnknown, start, "unknown source")
		return httperror.New(http.StatusNotFound, "unknown_source", "no source is configured at this path")
	}
	body := c.Body()
	if len(body) > src.maxBody {
		h.refuse(c, src.name, OutcomeTooLarge, start, "body too large", "bytes", len(body), "limit", src.maxBody)
		return httperror.New(http.StatusRequestEntityTooLarge, "body_too_large",
			fmt.Sprintf("body is larger than %d bytes", src.maxBody))
	}
	if err := src.verifier.Verify(func(name string) string { return c.Get(name) }, body, h.now()); err != nil {
		code := signatureCode(err)
		h.refuse(c, src.name, OutcomeUnauthorized, start, "signature refused", "reason", code)
		return httperror.New(http.StatusUnauthorized, code, err.Error())
	}

	var id, typ string
	if src.needJSON {
		var out [2]string
		if err := lookupJSON(body, src.paths, out[:]); err != nil {
			h.refuse(c, src.name, OutcomeInvalid, start, "malformed json")
			return httperror.New(http.StatusBadRequest, "malformed_json", "body is not valid JSON")
		}
		id, typ = out[0], out[1]
	}
	if src.idHeader != "" {
		id = c.Get(src.idHeader)
	}
	if src.typeHeader != "" {
		typ = c.Get(src.typeHeader)
	}
	if id == "" {
		h.refuse(c, src.name, OutcomeInvalid, start, "missing event id")
		return httperror.New(http.StatusBadRequest, "missing_event_id", "the event has no ID")
	}
	if len(id) > MaxEventIDLen {
		h.refuse(c, src.name, OutcomeInvalid, start, "event id too long", "bytes", len(id))
		return httperror.New(http.StatusBadRequest, "invalid_event_id",
			fmt.Sprintf("event ID is longer than %d bytes", MaxEventIDLen))
	}

	// Fiber reuses its buffers: copy everything the store keeps.
	ev := &store.Event{
		Source:      src.name,
		ID:          strings.Clone(id),
		Type:        strings.Clone(typ),
		ContentType: strings.Clone(c.Get(fiber.HeaderContentType)),
		Headers:     src.headersJSON(c),
		Body:        append([]byte(nil), body...),
		ReceivedAt:  time.Now(),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dup, err := h.store.Claim(ctx, ev)
	if err != nil {
		h.refuse(c, src.name, OutcomeUnavailable, start, "store unavailable", "err", err)
		c.Set(fiber.HeaderRetryAfter, "1")
		return httperror.New(http.StatusServiceUnavailable, "store_unavailable",
			"the event could not be stored; retry later")
	}
	status := OutcomeAccepted
	if dup {
		status = OutcomeDuplicate
		h.log.Info("duplicate event", "source", src.name, "event_id", ev.ID, "event_type", ev.Type)
	} else {
		h.notify()
		h.log.Debug("event accepted", "source", src.name, "event_id", ev.ID, "event_type", ev.Type, "seq", ev.Seq)
	}
	h.metrics.observe(src.name, status, start)
	return c.JSON(fiber.Map{"status": status, "source": src.name, "event_id": ev.ID, "event_type": ev.Type})
}

// refuse logs and counts a refused request.
func (h *Handler) refuse(c *fiber.Ctx, src, outcome string, start time.Time, msg string, attrs ...any) {
	sourceLabel := src
	if sourceLabel == "" {
		sourceLabel = "_unknown"
	}
	h.metrics.observe(sourceLabel, outcome, start)
	args := append([]any{"source", src, "path", c.Path(), "remote", c.IP(), "outcome", outcome}, attrs...)
	h.log.Warn("inbound request refused: "+msg, args...)
}

func signatureCode(err error) string {
	switch {
	case errors.Is(err, signature.ErrMissing):
		return "missing_signature"
	case errors.Is(err, signature.ErrMalformed):
		return "malformed_signature"
	case errors.Is(err, signature.ErrTimestamp):
		return "timestamp_out_of_tolerance"
	}
	return "invalid_signature"
}

func (s *source) headersJSON(c *fiber.Ctx) []byte {
	m := make(map[string]string, len(s.keepHeaders))
	for _, name := range s.keepHeaders {
		if v := c.Get(name); v != "" {
			m[name] = v // json.Marshal copies
		}
	}
	b, _ := json.Marshal(m)
	return b
}
