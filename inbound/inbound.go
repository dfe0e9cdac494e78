// Package inbound serves POST /webhooks/{source}: it verifies the sender's
// signature over the raw body, identifies the event, claims it in the store
// (the durable dedup) and wakes the outbox relay. A 2xx is sent only after
// the event is committed; a repeat of a stored event is answered 200
// "duplicate". Refused requests store nothing.
package inbound

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"
	"golang.org/x/net/http/httpguts"

	"github.com/hookgate/hookgate/expr"
	"github.com/hookgate/hookgate/httperror"
	"github.com/hookgate/hookgate/signature"
	"github.com/hookgate/hookgate/store"
)

// MaxEventIDLen is the longest accepted event ID, in bytes.
const MaxEventIDLen = 255

// MaxEventTypeLen is the longest accepted event type, in bytes. It keeps
// the type's subject (jetstream.Subject) far below NATS's 4 KiB control
// line.
const MaxEventTypeLen = 255

// textProblem says why s, an event ID or type, cannot travel unchanged, or
// returns "". Both travel as header values: in the stream's messages (NATS
// trims header values and turns line breaks into spaces; deliveries are
// checked against the stored ID) and in each delivery's X-Hookgate-Event-Id
// and -Type (net/http refuses control characters). Each must also be one
// exact text: invalid UTF-8 would be shown and compared as U+FFFD.
// inexact is lookupJSON's: s held invalid UTF-8 or an unpaired surrogate
// escape, already replaced.
func textProblem(s string, inexact bool) string {
	if inexact || !utf8.ValidString(s) {
		return "is not valid UTF-8 (an invalid byte or an unpaired surrogate)"
	}
	if s != "" && (s[0] == ' ' || s[len(s)-1] == ' ') {
		return "has a leading or trailing space"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		// C0, DEL, and C1 (U+0080-U+009F: 0xC2 then 0x80-0x9F, s being
		// valid UTF-8).
		if c < 0x20 || c == 0x7f || c == 0xc2 && s[i+1] < 0xa0 {
			return "has a control character"
		}
	}
	return ""
}

// Claimer stores an event unless it is already stored; see store.Store.Claim.
type Claimer interface {
	Claim(ctx context.Context, ev *store.Event) (dup bool, err error)
}

// ClusterClaimer claims an event just stored here across the gateways of a
// cluster (cluster mode; cluster.Claims): holder is "" when this gateway
// holds the claim, else the gateway that does. An error means the cluster
// could not be asked in time.
type ClusterClaimer interface {
	ClaimAtIntake(ctx context.Context, ev *store.Event) (holder string, err error)
}

// Handler is the inbound endpoint for every configured source.
type Handler struct {
	sources        map[string]*source
	store          Claimer
	cluster        ClusterClaimer
	clusterTimeout time.Duration
	notify         func()
	log            *slog.Logger
	metrics        *Metrics
	now            func() time.Time
	maxBody        int
}

// source is one configured sender, ready to serve.
type source struct {
	name                 string
	verifier             signature.Verifier
	maxBody              int
	idHeader, typeHeader string
	paths                []string // JSON paths to look up: id field, type field (either may be ""), the type's fallback if any
	needJSON             bool
	keepHeaders          []string
	handshake            signature.Handshake // nil unless the scheme has one
	idExpr, typeExpr     *expr.Program       // nil: none
	accepted, duplicate  *outcomeMetrics
}

// Options are the optional parts of New.
type Options struct {
	// Notify is called after each newly accepted event (wakes the relay).
	Notify func()
	// Metrics, if set, counts requests by source and outcome.
	Metrics *Metrics
	// Now is the clock for signature timestamps. Default time.Now.
	Now func() time.Time
	// Cluster, if set, claims each newly stored event across gateways
	// before it is answered: a copy another gateway holds is answered
	// duplicate (and never published here). Without an answer within
	// ClusterTimeout (default 500ms), the event is answered accepted and
	// the relay claims it before publishing.
	Cluster        ClusterClaimer
	ClusterTimeout time.Duration
}

// Source is one webhook sender, served at POST /webhooks/{Name}. New fills
// in the default stated on a field left at its zero value. Printed with
// fmt (any verb), slog or encoding/json, its secrets are masked.
type Source struct {
	// Name is the URL segment and the subject token. Required, unique.
	Name string
	// Verify is the signature scheme, one of signature.Names (stripe,
	// standard, github, hmac, none, and the provider presets). Required.
	Verify string
	// Secrets are tried in turn; any may match (secret rotation). Required
	// unless Verify is none.
	Secrets []string
	// Tolerance is the allowed clock skew of signed timestamps (stripe,
	// standard, svix, paddle, slack, twitch, discord). Default 5m, or the
	// scheme's (signature.Scheme.Tolerance: twitch 10m).
	Tolerance time.Duration
	// MaxBody is the largest accepted body in bytes. Default 1048576 (1 MiB).
	MaxBody int
	// HMAC configures verify: hmac.
	HMAC signature.HMACOptions
	// IDHeader and IDField say where the event ID is: a request header, or
	// a dot-separated JSON field path ("data.id"). If both are empty, the
	// scheme's (signature.Scheme.ID): stripe field "id", standard header
	// "webhook-id", github header "X-GitHub-Delivery", ...; hmac and none
	// need one of them.
	IDHeader string
	IDField  string
	// TypeHeader and TypeField say where the event type is, like the ID.
	// If both are empty, the scheme's (signature.Scheme.Type): stripe and
	// standard field "type", github header "X-GitHub-Event", ...; otherwise
	// the type is empty.
	TypeHeader string
	TypeField  string
	// IDExpr and TypeExpr are CEL expressions (package expr) giving the
	// event ID and type, in place of the header or field and the scheme's
	// default. TypeExpr reads body, headers and source; IDExpr those and
	// type.
	IDExpr   string
	TypeExpr string
}

// Defaults of Source.
const (
	DefaultTolerance = 5 * time.Minute
	DefaultMaxBody   = 1 << 20
)

// withDefaults returns sc with the defaults filled in.
func (sc Source) withDefaults() Source {
	scheme, _ := signature.Lookup(sc.Verify) // New reports an unknown one
	if sc.Tolerance <= 0 {
		sc.Tolerance = cmp.Or(scheme.Tolerance, DefaultTolerance)
	}
	if sc.MaxBody <= 0 {
		sc.MaxBody = DefaultMaxBody
	}
	idHeader, idField := scheme.ID.Header, scheme.ID.Field
	typeHeader, typeField := scheme.Type.Header, scheme.Type.Field
	if sc.IDHeader == "" && sc.IDField == "" && sc.IDExpr == "" {
		sc.IDHeader, sc.IDField = idHeader, idField
	}
	if sc.TypeHeader == "" && sc.TypeField == "" && sc.TypeExpr == "" {
		sc.TypeHeader, sc.TypeField = typeHeader, typeField
	}
	return sc
}

// masked is sc as it may be printed: each secret masked.
func (sc Source) masked() any {
	type source Source // without the methods
	m := source(sc)
	m.Secrets = make([]string, len(sc.Secrets))
	for i, s := range sc.Secrets {
		if s != "" {
			m.Secrets[i] = "[masked]"
		}
	}
	return m
}

// Format prints the source with its secrets masked, for every verb.
func (sc Source) Format(f fmt.State, verb rune) {
	_, _ = fmt.Fprintf(f, fmt.FormatString(f, verb), sc.masked()) // Format cannot report an error
}

// LogValue is the source with its secrets masked.
func (sc Source) LogValue() slog.Value { return slog.AnyValue(sc.masked()) }

// MarshalJSON is the source with its secrets masked (slog's JSON handler
// writes a slice of sources with it).
func (sc Source) MarshalJSON() ([]byte, error) { return json.Marshal(sc.masked()) }

// New builds the handler for sources; it reports a bad scheme or secret.
func New(sources []Source, st Claimer, log *slog.Logger, opts Options) (*Handler, error) {
	h := &Handler{
		sources: make(map[string]*source, len(sources)),
		store:   st, notify: opts.Notify, log: log, metrics: opts.Metrics, now: opts.Now,
		cluster: opts.Cluster, clusterTimeout: opts.ClusterTimeout,
	}
	if h.clusterTimeout <= 0 {
		h.clusterTimeout = 500 * time.Millisecond
	}
	if h.notify == nil {
		h.notify = func() {}
	}
	if h.now == nil {
		h.now = time.Now
	}
	for i, sc := range sources {
		sc = sc.withDefaults()
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
		src.keepHeaders = keepHeaders(sc)
		if scheme, ok := signature.Lookup(sc.Verify); ok {
			src.handshake = scheme.Handshake
			// The scheme's type field may have a fallback (slack: event.type, else type).
			if f := scheme.Type.Fallback; f != "" && sc.TypeHeader == "" && sc.TypeField == scheme.Type.Field {
				src.paths = append(src.paths, f)
			}
		}
		if err := src.compile(sc); err != nil {
			return nil, fmt.Errorf("sources[%d] (%s): %w", i, sc.Name, err)
		}
		src.accepted = h.metrics.forOutcome(sc.Name, OutcomeAccepted)
		src.duplicate = h.metrics.forOutcome(sc.Name, OutcomeDuplicate)
		h.sources[sc.Name] = src
		h.maxBody = max(h.maxBody, src.maxBody)
	}
	return h, nil
}

func newVerifier(sc Source) (signature.Verifier, error) {
	return signature.NewVerifier(sc.Verify, signature.Params{Secrets: sc.Secrets, Tolerance: sc.Tolerance, HMAC: sc.HMAC})
}

// keepHeaders lists the request headers stored with each event: those that
// identify it and describe the sender, never a signature.
func keepHeaders(sc Source) []string {
	hs := []string{"User-Agent"}
	for _, h := range []string{sc.IDHeader, sc.TypeHeader} {
		if h != "" {
			hs = append(hs, h)
		}
	}
	if scheme, ok := signature.Lookup(sc.Verify); ok {
		hs = append(hs, scheme.KeepHeaders...)
	}
	// In the order encoding/json writes a map's keys, once each.
	sort.Strings(hs)
	return slices.Compact(hs)
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
	OutcomeHandshake    = "handshake" // a provider's check of the endpoint, answered, not stored
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
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	sc.c = c
	if err := src.verifier.Verify(sc.header, body, h.now()); err != nil {
		code := signatureCode(err)
		h.refuse(c, src.name, OutcomeUnauthorized, start, "signature refused", "reason", code)
		return httperror.New(http.StatusUnauthorized, code, err.Error())
	}
	if src.handshake != nil {
		if a, ok := src.handshake(sc.header, body); ok {
			h.answerHandshake(c, src.name, a, start)
			return nil
		}
	}

	id, typ, inexact, err := h.identify(c, src, body, start)
	if err != nil {
		return err
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
	if p := textProblem(id, inexact[0]); p != "" {
		h.refuse(c, src.name, OutcomeInvalid, start, "invalid event id", "problem", p)
		return httperror.New(http.StatusBadRequest, "invalid_event_id", "event ID "+p)
	}
	if len(typ) > MaxEventTypeLen {
		h.refuse(c, src.name, OutcomeInvalid, start, "event type too long", "bytes", len(typ))
		return httperror.New(http.StatusBadRequest, "invalid_event_type",
			fmt.Sprintf("event type is longer than %d bytes", MaxEventTypeLen))
	}
	if p := textProblem(typ, inexact[1]); p != "" {
		h.refuse(c, src.name, OutcomeInvalid, start, "invalid event type", "problem", p)
		return httperror.New(http.StatusBadRequest, "invalid_event_type", "event type "+p)
	}
	contentType := c.Get(fiber.HeaderContentType)
	if !httpguts.ValidHeaderFieldValue(contentType) {
		h.refuse(c, src.name, OutcomeInvalid, start, "invalid content type")
		return httperror.New(http.StatusBadRequest, "invalid_content_type",
			"Content-Type has a control character")
	}

	// Fiber reuses its buffers once the handler returns, but nothing here
	// outlives it: Claim binds (SQLite copies) the event's bytes before it
	// returns, so the event points into the request as it is, and its
	// scratch space is pooled.
	sc.headers = src.appendHeadersJSON(sc.headers[:0], c)
	ev := &sc.ev
	*ev = store.Event{
		Source:      src.name,
		ID:          id,
		Type:        typ,
		ContentType: contentType,
		Headers:     sc.headers,
		Body:        body,
		ReceivedAt:  time.Now(),
	}
	dup, err := h.store.Claim(context.Background(), ev)
	if err != nil {
		h.refuse(c, src.name, OutcomeUnavailable, start, "store unavailable", "err", err)
		c.Set(fiber.HeaderRetryAfter, "1")
		return httperror.New(http.StatusServiceUnavailable, "store_unavailable",
			"the event could not be stored; retry later")
	}
	status := OutcomeAccepted
	debug := h.log.Enabled(context.Background(), slog.LevelDebug)
	dup = h.afterClaim(ev, dup, debug)
	if dup {
		status = OutcomeDuplicate
		if debug {
			h.log.Debug("duplicate event", "source", src.name, "event_id", ev.ID, "event_type", ev.Type)
		}
		src.duplicate.observe(start)
	} else {
		if debug {
			h.log.Debug("event accepted", "source", src.name, "event_id", ev.ID, "event_type", ev.Type, "seq", ev.Seq)
		}
		src.accepted.observe(start)
	}
	// The answer encoding/json gives for the map {"status","source",
	// "event_id","event_type"} (keys sorted), without its reflection.
	out := append(sc.out[:0], `{"event_id":`...)
	out = appendJSONString(out, ev.ID)
	out = append(out, `,"event_type":`...)
	out = appendJSONString(out, ev.Type)
	out = append(out, `,"source":`...)
	out = appendJSONString(out, src.name)
	out = append(out, `,"status":`...)
	out = appendJSONString(out, status)
	out = append(out, '}')
	sc.out = out
	c.Response().Header.SetContentType(fiber.MIMEApplicationJSON)
	c.Response().SetBody(out) // copies
	return nil
}

// typeOrFallback is the type lookupJSON found, or if it is empty the
// scheme's fallback field (out[2]) when there is one.
func typeOrFallback(out []string, inexact []bool) (string, bool) {
	if out[1] == "" && len(out) > 2 {
		return out[2], inexact[2]
	}
	return out[1], inexact[1]
}

// answerHandshake sends a handshake's answer; nothing is stored.
func (h *Handler) answerHandshake(c *fiber.Ctx, src string, a signature.Answer, start time.Time) {
	h.metrics.observe(src, OutcomeHandshake, start)
	h.log.Debug("handshake answered", "source", src, "status", a.Status)
	if a.Status == 0 {
		a.Status = http.StatusOK
	}
	if a.ContentType == "" {
		a.ContentType = "text/plain; charset=utf-8"
	}
	c.Status(a.Status)
	c.Response().Header.SetContentType(a.ContentType)
	c.Set("X-Content-Type-Options", "nosniff")
	c.Response().SetBody(a.Body) // copies
}

// afterClaim follows the local claim of ev: a new event wakes the relay
// and, in cluster mode, is claimed in the cluster first. It returns
// whether ev is a duplicate: stored here already, or (cluster mode) held
// by another gateway (the relay records it so and never publishes it).
func (h *Handler) afterClaim(ev *store.Event, dup, debug bool) bool {
	if dup {
		return true
	}
	if h.cluster != nil {
		dup = h.claimInCluster(ev, debug)
	}
	h.notify()
	return dup
}

// claimInCluster claims ev, just stored here, in the cluster; it returns
// true when another gateway holds it (the copy is a duplicate).
func (h *Handler) claimInCluster(ev *store.Event, debug bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), h.clusterTimeout)
	defer cancel()
	holder, err := h.cluster.ClaimAtIntake(ctx, ev)
	if err != nil {
		if debug {
			h.log.Debug("cluster claim at intake failed; accepted here, claimed before publishing",
				"source", ev.Source, "event_id", ev.ID, "err", err)
		}
		return false
	}
	if holder != "" && debug {
		h.log.Debug("event held by another gateway", "source", ev.Source, "event_id", ev.ID, "holder", holder)
	}
	return holder != ""
}

// scratch is one request's reusable memory.
type scratch struct {
	c       *fiber.Ctx
	header  signature.Header // sc.get, bound once
	ev      store.Event
	headers []byte
	out     []byte
}

var scratchPool = sync.Pool{New: func() any {
	sc := new(scratch)
	sc.header = sc.get
	return sc
}}

func (sc *scratch) get(name string) string { return sc.c.Get(name) }

// release drops the references into the request and pools sc.
func (sc *scratch) release() {
	sc.c = nil
	sc.ev = store.Event{}
	if cap(sc.headers) > 4<<10 || cap(sc.out) > 4<<10 {
		return // keep the pool small
	}
	scratchPool.Put(sc)
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

// maxKeptHeaders bounds the JSON of an event's kept headers: escaped, a
// sender's User-Agent could otherwise take six times its bytes, and the
// JSON travels with the body (cluster mode's event record) within the
// broker's jetstream.HeaderRoom.
const maxKeptHeaders = 4 << 10

// appendHeadersJSON appends the JSON object of the kept headers that are
// present, as encoding/json encodes a map[string]string (keys sorted). A
// header that would take the object past maxKeptHeaders is left out.
func (s *source) appendHeadersJSON(dst []byte, c *fiber.Ctx) []byte {
	start := len(dst)
	dst = append(dst, '{')
	first := true
	for _, name := range s.keepHeaders {
		v := c.Get(name)
		if v == "" {
			continue
		}
		mark := len(dst)
		if !first {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, name)
		dst = append(dst, ':')
		dst = appendJSONString(dst, v)
		if len(dst)-start+1 > maxKeptHeaders {
			dst = dst[:mark]
			continue
		}
		first = false
	}
	return append(dst, '}')
}

// appendJSONString appends s as a JSON string exactly as encoding/json
// encodes it (with its default HTML escaping): <, > and & as \u003c,
// \u003e and \u0026, U+2028 and U+2029 escaped, each byte of invalid UTF-8
// as \ufffd.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if jsonSafe(b) {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// jsonSafe reports whether encoding/json writes the ASCII byte b as is.
func jsonSafe(b byte) bool {
	return b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&'
}

// identify takes the event's ID and type from the source's header, JSON
// field or expression; inexact says which held invalid UTF-8 or a lone
// surrogate (the ID, the type, the type's fallback).
func (h *Handler) identify(c *fiber.Ctx, src *source, body []byte, start time.Time) (id, typ string, inexact [3]bool, err error) {
	if src.needJSON {
		var out [3]string
		n := len(src.paths)
		if err := lookupJSON(body, src.paths, out[:n], inexact[:n]); err != nil {
			h.refuse(c, src.name, OutcomeInvalid, start, "malformed json")
			return "", "", inexact, httperror.New(http.StatusBadRequest, "malformed_json", "body is not valid JSON")
		}
		id = out[0]
		typ, inexact[1] = typeOrFallback(out[:n], inexact[:n])
	}
	if src.idHeader != "" {
		id, inexact[0] = c.Get(src.idHeader), false
	}
	if src.typeHeader != "" {
		typ, inexact[1] = c.Get(src.typeHeader), false
	}
	id, typ, err = h.expressions(c, src, body, id, typ, (*[2]bool)(inexact[:2]), start)
	return id, typ, inexact, err
}
