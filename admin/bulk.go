package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"github.com/hookgate/hookgate/httperror"
	"github.com/hookgate/hookgate/store"
)

// BulkStore counts the deliveries a bulk retry matches.
type BulkStore interface {
	CountDeliveries(ctx context.Context, f store.DeliveryFilter) (int64, error)
}

// BatchRetrier retries a batch of deliveries and returns once their rounds
// are over (outbound.Engine.RetryBatch).
type BatchRetrier interface {
	RetryBatch(ctx context.Context, ids []string) (int, error)
}

const (
	// bulkBatch is how many deliveries a bulk retry reads and retries at
	// once: its memory and its rounds in flight.
	bulkBatch = 100
	// bulkQueue is how many bulk retries may wait for the one running.
	bulkQueue = 8
	// bulkMaxBody bounds a bulk retry's request body.
	bulkMaxBody = 4096
	// bulkMaxName bounds a route or source name in a filter.
	bulkMaxName = 256
)

// bulkFilter is the body of POST /v1/deliveries/retry.
type bulkFilter struct {
	Route  string `json:"route"`
	Source string `json:"source"`
	// State is dead (the default) or retrying: the states a retry applies to.
	State string `json:"state"`
	Since string `json:"since"` // RFC 3339: deliveries created at or after it
	Until string `json:"until"` // RFC 3339: deliveries created before it
	// All must be true to retry without a route, source or since.
	All bool `json:"all"`
}

// parseBulkFilter reads a bulk retry's filter: one JSON object, no unknown
// field, a retryable state, RFC 3339 times, and a route, source or since
// unless all is true.
func parseBulkFilter(body []byte) (store.DeliveryFilter, error) {
	var f store.DeliveryFilter
	b, err := decodeBulkFilter(body)
	if err != nil {
		return f, err
	}
	for name, v := range map[string]string{"route": b.Route, "source": b.Source} {
		if len(v) > bulkMaxName || !utf8.ValidString(v) || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return f, badFilter(name + " must be a name of at most 256 printable characters")
		}
	}
	f.Route, f.Source, f.State = b.Route, b.Source, b.State
	switch f.State {
	case "":
		f.State = store.StateDead
	case store.StateDead, store.StateRetrying:
	default:
		return f, badFilter("state must be dead or retrying (the states a retry applies to)")
	}
	if f.Since, err = bulkTime("since", b.Since); err != nil {
		return f, err
	}
	if f.Until, err = bulkTime("until", b.Until); err != nil {
		return f, err
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return f, badFilter("since must be before until")
	}
	if f.Route == "" && f.Source == "" && f.Since.IsZero() && !b.All {
		return f, badFilter(`give a route, a source or since, or "all": true to retry every ` + f.State + " delivery")
	}
	return f, nil
}

// decodeBulkFilter reads body as one filter object with no unknown field.
func decodeBulkFilter(body []byte) (*bulkFilter, error) {
	if len(body) > bulkMaxBody {
		return nil, httperror.New(http.StatusRequestEntityTooLarge, "body_too_large", "the filter is larger than 4096 bytes")
	}
	var b bulkFilter
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, httperror.New(http.StatusBadRequest, "malformed_json", "body is not valid JSON")
		}
		return nil, badFilter(strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return nil, httperror.New(http.StatusBadRequest, "malformed_json", "body is not one JSON object")
	}
	return &b, nil
}

// bulkTime reads an RFC 3339 time; "" is the zero time.
func bulkTime(name, v string) (time.Time, error) {
	t, ok := parseBound(v)
	if !ok {
		return t, badFilter(name + " " + boundMsg)
	}
	return t, nil
}

const boundMsg = "must be an RFC 3339 time at or after 1970-01-01T00:00:00Z, e.g. 2024-05-01T12:00:00Z"

// parseBound reads an RFC 3339 time bounding a search; "" is the zero
// time (unbounded). A time before 1970 is refused: the zero time it could
// be would turn a bound into none.
func parseBound(v string) (time.Time, bool) {
	if v == "" {
		return time.Time{}, true
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil || t.Unix() < 0 {
		return time.Time{}, false
	}
	return t, true
}

func badFilter(msg string) error {
	return httperror.New(http.StatusBadRequest, "invalid_filter", msg)
}

// bulkRunner runs bulk retries one at a time, in the order asked; at most
// bulkQueue wait. No goroutine runs while none is queued.
type bulkRunner struct {
	mu      sync.Mutex
	queue   []store.DeliveryFilter
	running bool
}

// add queues f; false when the queue is full.
func (b *bulkRunner) add(f store.DeliveryFilter, run func(store.DeliveryFilter)) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) >= bulkQueue {
		return false
	}
	b.queue = append(b.queue, f)
	if !b.running {
		b.running = true
		go b.work(run)
	}
	return true
}

func (b *bulkRunner) work(run func(store.DeliveryFilter)) {
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		f := b.queue[0]
		b.queue = b.queue[1:]
		b.mu.Unlock()
		run(f)
	}
}

// registerBulk mounts POST /v1/deliveries/retry when the store counts
// deliveries and the engine retries batches.
func (h *Handler) registerBulk(v1 fiber.Router) {
	bs, ok1 := h.store.(BulkStore)
	br, ok2 := h.engine.(BatchRetrier)
	if !ok1 || !ok2 {
		return
	}
	runner := &bulkRunner{}
	v1.Post("/deliveries/retry", operatorOnly, func(c *fiber.Ctx) error {
		f, err := parseBulkFilter(c.Body())
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(c.UserContext(), h.listTimeout)
		n, err := bs.CountDeliveries(ctx, f)
		cancel()
		if err != nil {
			return h.listErr(err, "route, source, state, since or until")
		}
		if n > 0 && !runner.add(f, func(f store.DeliveryFilter) { retryAll(context.Background(), h.store, br, f, h.log) }) {
			c.Set(fiber.HeaderRetryAfter, "10")
			return httperror.New(http.StatusServiceUnavailable, "busy", "too many bulk retries are waiting; retry later")
		}
		h.log.Info("bulk retry queued", "count", n, "route", f.Route, "source", f.Source, "state", f.State,
			"since", f.Since, "until", f.Until)
		return c.Status(http.StatusAccepted).JSON(fiber.Map{"count": n})
	})
}

// retryAll retries the deliveries f matches, bulkBatch at a time in list
// order, each batch's rounds over before the next batch is read. A
// delivery retried again meanwhile (pending, succeeded) is not sent twice:
// Retry skips what succeeded and the delivery's claim serialises rounds.
func retryAll(ctx context.Context, st Store, br BatchRetrier, f store.DeliveryFilter, log *slog.Logger) {
	f.Limit = bulkBatch
	total := 0
	for {
		ds, err := st.ListDeliveries(ctx, f)
		if err != nil {
			log.Error("bulk retry stopped: the store is unavailable", "retried", total, "err", err)
			return
		}
		ids := make([]string, len(ds))
		for i := range ds {
			ids[i] = ds[i].UID
		}
		n, err := br.RetryBatch(ctx, ids)
		total += n
		if err != nil {
			log.Warn("bulk retry stopped", "retried", total, "err", err)
			return
		}
		if len(ds) < f.Limit {
			break
		}
		cur := ds[len(ds)-1].Cursor()
		f.After = &cur
	}
	log.Info("bulk retry done", "retried", total, "route", f.Route, "source", f.Source, "state", f.State)
}
