package console

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"github.com/hookgate/hookgate/httperror"
	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/store"
)

// Bounds of what a request may ask for.
const (
	maxParam     = 256 // bytes of a search value
	maxCursor    = 2048
	pageSize     = 100 // rows of a list
	excerptBytes = 300 // of a response shown in a timeline
	bodyShown    = 256 << 10
)

var funcs = template.FuncMap{
	"path": url.PathEscape,
	// query escapes a value in a query string: hx-get and hx-post are
	// not URL attributes to html/template, which only HTML-escapes them.
	"query": url.QueryEscape,
	"list":  func() []string { return []string{"", "pending", "retrying", "succeeded", "dead"} },
	"time": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000Z")
	},
	"ms": func(d time.Duration) int64 { return d.Milliseconds() },
	"excerpt": func(b []byte) string {
		if len(b) > excerptBytes {
			b = b[:excerptBytes]
		}
		return strings.ToValidUTF8(string(b), "�")
	},
	"num": func(f float64) string { return strconv.FormatFloat(math.Round(f*10)/10, 'f', -1, 64) },
}

func badParam(name, msg string) error {
	return httperror.New(http.StatusBadRequest, "invalid_parameter", name+" "+msg)
}

func unavailable() error {
	return httperror.New(http.StatusServiceUnavailable, "store_unavailable", "the store is unavailable; retry later")
}

// param returns query parameter name, bounded and copied (fiber reuses
// its buffers).
func param(c *fiber.Ctx, name string) (string, error) {
	limit := maxParam
	if name == "cursor" { // names a delivery: up to three names and an ID
		limit = maxCursor
	}
	v := strings.TrimSpace(c.Query(name))
	if len(v) > limit || !utf8.ValidString(v) {
		return "", badParam(name, fmt.Sprintf("must be valid UTF-8 of at most %d bytes", limit))
	}
	return strings.Clone(v), nil
}

type routeRow struct {
	outbound.RouteStatus
	Paused bool
}

func (c *Console) routeRows(ctx *fiber.Ctx) []routeRow {
	var out []routeRow
	for _, r := range c.cfg.Routes.Routes(ctx.UserContext()) {
		if r.Name == outbound.TaskRoute {
			continue
		}
		out = append(out, routeRow{RouteStatus: r, Paused: r.State == outbound.RoutePaused})
	}
	return out
}

func (c *Console) overview(ctx *fiber.Ctx) error {
	type total struct {
		Name       string
		Hour, Day  float64
		HasH, HasD bool
	}
	hour, day := c.windows()
	merge := func(h, d map[string]float64) []total {
		var out []total
		for k := range d {
			_, hh := h[k]
			out = append(out, total{Name: k, Hour: h[k], Day: d[k], HasH: hh, HasD: true})
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
		return out
	}
	return c.render(ctx, "overview", map[string]any{
		"Routes":   c.routeRows(ctx),
		"Intake":   merge(hour.IntakeTotal, day.IntakeTotal),
		"Delivery": merge(hour.DeliveryTotal, day.DeliveryTotal),
		"Latency":  merge(hour.LatencyMean, day.LatencyMean),
	})
}

func (c *Console) windows() (hour, day Window) {
	if c.cfg.Stats == nil {
		return Window{}, Window{}
	}
	return c.cfg.Stats.Window(time.Hour, time.Minute), c.cfg.Stats.Window(24*time.Hour, 15*time.Minute)
}

func (c *Console) routes(ctx *fiber.Ctx) error {
	return c.render(ctx, "routes", c.routeRows(ctx))
}

func (c *Console) stats(ctx *fiber.Ctx) error {
	hour, day := c.windows()
	return ctx.JSON(map[string]Window{"hour": hour, "day": day})
}

// fieldPath is a JSON field as the search form takes it: names (letters,
// digits, _ and -) joined by dots, each optionally followed by [n].
var fieldPath = regexp.MustCompile(`^[A-Za-z0-9_-]+(\[[0-9]{1,4}\])?(\.[A-Za-z0-9_-]+(\[[0-9]{1,4}\])?){0,15}$`)

// jsonPath turns a field such as data.object.id into SQLite's
// $."data"."object"."id".
func jsonPath(field string) string {
	var b strings.Builder
	b.WriteString("$")
	for _, part := range strings.Split(field, ".") {
		name, idx, _ := strings.Cut(part, "[")
		b.WriteString(`."` + name + `"`)
		if idx != "" {
			b.WriteString("[" + idx)
		}
	}
	return b.String()
}

// parseTime takes RFC 3339 or the browser's datetime-local form, read as
// UTC.
func parseTime(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04"} {
		// Before 1970 is refused: the zero time it could be reads as no bound.
		if t, err := time.Parse(layout, v); err == nil && t.Unix() >= 0 {
			return t, nil
		}
	}
	return time.Time{}, badParam(name, "must be a time at or after 1970-01-01T00:00 UTC, such as 2024-05-01T12:00 (UTC) or RFC 3339")
}

func (c *Console) events(ctx *fiber.Ctx) error {
	var f store.EventSearch
	var vals [8]string
	for i, name := range []string{"source", "type", "id", "since", "until", "field", "value"} {
		v, err := param(ctx, name)
		if err != nil {
			return err
		}
		vals[i] = v
	}
	f.Source, f.Type, f.EventID = vals[0], vals[1], vals[2]
	f.Sources = c.cfg.Sources
	var err error
	if f.Since, err = parseTime("since", vals[3]); err != nil {
		return err
	}
	if f.Until, err = parseTime("until", vals[4]); err != nil {
		return err
	}
	if field := vals[5]; field != "" {
		if !fieldPath.MatchString(field) {
			return badParam("field", "must be a dotted path of names, e.g. data.object.id or items[0].sku")
		}
		f.FieldPath, f.FieldValue = jsonPath(field), vals[6]
	}
	f.Limit = pageSize
	// fasthttp does not say when the browser has gone and UserContext
	// never ends: the bound is what stops a search nobody waits for.
	rc, cancel := context.WithTimeout(ctx.UserContext(), c.cfg.SearchTimeout)
	defer cancel()
	if f.FieldPath != "" {
		select {
		case c.searches <- struct{}{}:
			defer func() { <-c.searches }()
		case <-rc.Done():
			return c.searchTimeout(f)
		}
	}
	evs, cut, err := c.cfg.Store.SearchEvents(rc, f)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return c.searchTimeout(f)
	case err != nil:
		return unavailable()
	}
	return c.render(ctx, "events", map[string]any{"Events": evs, "Cut": cut, "Full": len(evs) == pageSize})
}

// searchTimeout answers a search stopped at its bound (logged without
// the value searched for).
func (c *Console) searchTimeout(f store.EventSearch) error {
	c.log.Warn("console search stopped at its bound", "timeout", c.cfg.SearchTimeout, "field", f.FieldPath != "")
	return httperror.New(http.StatusServiceUnavailable, "search_timeout", fmt.Sprintf(
		"the search did not finish within %s and was stopped: narrow it (a shorter time range, a source, a type or an event ID)",
		c.cfg.SearchTimeout))
}

// sourceAndID reads an event's source and ID; task events are on the
// tasks page.
func sourceAndID(ctx *fiber.Ctx) (string, string, error) {
	source, err1 := param(ctx, "source")
	id, err2 := param(ctx, "id")
	if err := errors.Join(err1, err2); err != nil {
		return "", "", err
	}
	if source == "" || id == "" || source == store.TaskSource {
		return "", "", httperror.New(http.StatusNotFound, "not_found", "no such event")
	}
	return source, id, nil
}

type header struct{ Name, Value string }

type deliveryView struct {
	store.Delivery
	Attempts []store.Attempt
	MaxMS    int64
}

func (c *Console) event(ctx *fiber.Ctx) error {
	source, id, err := sourceAndID(ctx)
	if err != nil {
		return err
	}
	rc := ctx.UserContext()
	ev, err := c.cfg.Store.GetEvent(rc, source, id)
	if errors.Is(err, store.ErrNotFound) {
		return httperror.New(http.StatusNotFound, "not_found", "no such event")
	}
	if err != nil {
		return unavailable()
	}
	var hdrs []header
	var raw map[string]any
	if json.Unmarshal(ev.Headers, &raw) == nil {
		for k, v := range raw {
			switch v := v.(type) {
			case string:
				hdrs = append(hdrs, header{k, v})
			case []any:
				for _, x := range v {
					s, _ := x.(string)
					hdrs = append(hdrs, header{k, s})
				}
			default:
				b, _ := json.Marshal(v)
				hdrs = append(hdrs, header{k, string(b)})
			}
		}
	}
	sort.SliceStable(hdrs, func(i, j int) bool { return hdrs[i].Name < hdrs[j].Name })
	ds, err := c.cfg.Store.ListDeliveries(rc, store.DeliveryFilter{Source: source, EventID: id, Limit: 500})
	if err != nil {
		return unavailable()
	}
	views := make([]deliveryView, 0, len(ds))
	for _, d := range ds {
		as, err := c.cfg.Store.Attempts(rc, d.ID)
		if err != nil {
			return unavailable()
		}
		v := deliveryView{Delivery: d, Attempts: as, MaxMS: 1}
		for _, a := range as {
			v.MaxMS = max(v.MaxMS, a.Duration.Milliseconds())
		}
		views = append(views, v)
	}
	body, enc := prettyBody(ev.Body)
	return c.render(ctx, "event", map[string]any{
		"Event": ev, "Headers": hdrs, "Body": body, "Encoding": enc, "Deliveries": views,
		"Size": len(ev.Body),
	})
}

// prettyBody returns the body to show: indented when it is JSON (and its
// indented form stays within maxIndented), as text when it is UTF-8, else
// base64; at most bodyShown bytes.
func prettyBody(b []byte) (string, string) {
	var out bytes.Buffer
	if json.Valid(b) && indentedSize(b, len(indentBy)) <= maxIndented && json.Indent(&out, b, "", indentBy) == nil {
		return truncate(out.String()), "json"
	}
	if utf8.Valid(b) {
		return truncate(string(b)), "text"
	}
	return truncate(base64.StdEncoding.EncodeToString(b)), "base64"
}

const (
	indentBy = "  "
	// maxIndented bounds the indented form of a body: a sender's body of
	// many items nested thousands deep indents to thousands of times its
	// size (each item on a line as deep as it is).
	maxIndented = 4 << 20
)

// indentedSize is at most what json.Indent makes of the JSON b, indent
// bytes a level: a line break and the depth's indentation after each
// opening bracket and comma and before each closing one, a space after
// each colon.
func indentedSize(b []byte, indent int) int {
	size, depth := len(b), 0
	inString, escaped := false, false
	for _, c := range b {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
			size += 1 + depth*indent
		case '}', ']':
			depth--
			size += 1 + depth*indent
		case ',':
			size += 1 + depth*indent
		case ':':
			size++
		}
	}
	return size
}

func truncate(s string) string {
	if len(s) <= bodyShown {
		return s
	}
	return strings.ToValidUTF8(s[:bodyShown], "") + "\n… (cut at 256 KiB)"
}

// deliveryList is a page of deliveries (dead letters, tasks).
func (c *Console) deliveryList(ctx *fiber.Ctx, f store.DeliveryFilter) ([]store.Delivery, string, error) {
	cur, err := param(ctx, "cursor")
	if err != nil {
		return nil, "", err
	}
	if cur != "" {
		dc, err := store.ParseDeliveryCursor(cur)
		if err != nil {
			return nil, "", badParam("cursor", "is not a cursor this console returned")
		}
		f.After = &dc
	}
	f.Limit = pageSize + 1
	ds, err := c.cfg.Store.ListDeliveries(ctx.UserContext(), f)
	if err != nil {
		return nil, "", unavailable()
	}
	next := ""
	if len(ds) > pageSize {
		ds = ds[:pageSize]
		next = ds[len(ds)-1].Cursor().String()
	}
	return ds, next, nil
}

func (c *Console) dead(ctx *fiber.Ctx) error {
	route, err := param(ctx, "route")
	if err != nil {
		return err
	}
	rows := c.routeRows(ctx)
	if route == "" && len(rows) > 0 {
		route = rows[0].Name
	}
	var ds []store.Delivery
	next := ""
	if route != "" {
		if ds, next, err = c.deliveryList(ctx, store.DeliveryFilter{Route: route, State: store.StateDead}); err != nil {
			return err
		}
	}
	return c.render(ctx, "dead", map[string]any{"Route": route, "Routes": rows, "Deliveries": ds, "Next": next})
}

func (c *Console) tasks(ctx *fiber.Ctx) error {
	state, err := param(ctx, "state")
	if err != nil {
		return err
	}
	switch state {
	case "", store.StatePending, store.StateRetrying, store.StateSucceeded, store.StateDead:
	default:
		return badParam("state", "must be pending, retrying, succeeded or dead")
	}
	ds, next, err := c.deliveryList(ctx, store.DeliveryFilter{Route: outbound.TaskRoute, State: state})
	if err != nil {
		return err
	}
	return c.render(ctx, "tasks", map[string]any{"State": state, "Deliveries": ds, "Next": next})
}
