// Package tasks serves the task-forwarding API. POST /v1/tasks hands
// hookgate a request for a downstream URL, with IETF Idempotency-Key
// semantics (draft-ietf-httpapi-idempotency-key-header, as Stripe behaves);
// GET /v1/tasks/{id} shows how its delivery stands. A task travels like a
// webhook: stored in the outbox, published to JetStream, delivered by the
// outbound engine with the same retries, schedule, records and dead letters.
package tasks

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http/httpguts"

	"github.com/hookgate/hookgate/admin"
	"github.com/hookgate/hookgate/cluster"
	"github.com/hookgate/hookgate/egress"
	"github.com/hookgate/hookgate/httperror"
	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/store"
)

// MaxKeyLen is the longest accepted Idempotency-Key.
const MaxKeyLen = 255

// abandonAfter is how long a key may stay 'processing' before it is taken
// for abandoned (the gateway died mid-request) and claimed again.
const abandonAfter = time.Minute

// Store is what the API needs from the store.
type Store interface {
	ClaimKey(ctx context.Context, scope, key, fingerprint string, ttl, abandonAfter time.Duration) (store.KeyOutcome, *store.StoredAnswer, error)
	ReleaseKey(ctx context.Context, scope, key string) error
	CreateTask(ctx context.Context, ev *store.Event, scope, key string, status int, response []byte) error
	DropTask(ctx context.Context, id, scope, key, digest string) error
	TaskScope(ctx context.Context, id string) (string, error)
	GetEvent(ctx context.Context, source, id string) (*store.Event, error)
	Delivery(ctx context.Context, route, source, eventID string) (*store.Delivery, error)
	Attempts(ctx context.Context, deliveryID int64) ([]store.Attempt, error)
}

// URLChecker vets a task URL at submit time (egress.Policy).
type URLChecker interface {
	CheckURL(ctx context.Context, raw string) error
}

// Cluster is the cluster claim store (cluster.Claims), in cluster mode.
type Cluster interface {
	// ClaimAtIntake claims a task just stored here; holder is "" when
	// this gateway holds it.
	ClaimAtIntake(ctx context.Context, ev *store.Event) (holder string, err error)
	// Holder reads who holds a task, and its request's digest.
	Holder(ctx context.Context, source, id string) (holder cluster.Owner, found bool, err error)
}

// Handler is the task API.
type Handler struct {
	store   Store
	policy  URLChecker
	notify  func()
	keyTTL  time.Duration
	maxBody int
	// maxStored bounds a task as stored (Config.MaxStored).
	maxStored int
	cluster   Cluster
	wait      time.Duration // bounds each request to cluster
	log       *slog.Logger
	answers   *prometheus.CounterVec
}

// Config tunes the task API. New fills in the default stated on a field
// left at its zero value.
type Config struct {
	// KeyTTL is how long an Idempotency-Key and its answer are remembered.
	// Default 24h.
	KeyTTL time.Duration
	// MaxBody is the largest task request accepted, in bytes. Default
	// 1048576 (1 MiB).
	MaxBody int
	// Cluster, if set (cluster mode), makes one Idempotency-Key (per
	// token) one task across the gateways: the task's ID is derived from
	// (token scope, key), so the cluster claim of its event makes one
	// gateway deliver it, and a request another gateway took already is
	// answered with its task ID, or 422 if the request differs. Default:
	// none (single gateway: random task IDs).
	Cluster Cluster
	// ClusterTimeout bounds each request to Cluster. Default 500ms.
	ClusterTimeout time.Duration
	// MaxStored is the most bytes a task may take as stored and published
	// (JSON, its body base64-encoded): the broker's max payload less its
	// header room. A task past it, or past four thirds of MaxBody and
	// 1 KiB if that is more, is 413. Default 0: that bound alone.
	MaxStored int
}

// Defaults of Config.
const (
	DefaultKeyTTL         = 24 * time.Hour
	DefaultMaxBody        = 1 << 20
	DefaultClusterTimeout = 500 * time.Millisecond
)

// New returns the task API. notify wakes the outbox relay; reg, if set,
// receives the answer counter.
func New(cfg Config, st Store, policy URLChecker, notify func(), reg prometheus.Registerer, log *slog.Logger) *Handler {
	if cfg.KeyTTL <= 0 {
		cfg.KeyTTL = DefaultKeyTTL
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.ClusterTimeout <= 0 {
		cfg.ClusterTimeout = DefaultClusterTimeout
	}
	h := &Handler{store: st, policy: policy, notify: notify, keyTTL: cfg.KeyTTL, maxBody: cfg.MaxBody,
		maxStored: max(cfg.MaxBody+cfg.MaxBody/3+storedSlack, cfg.MaxStored),
		cluster:   cfg.Cluster, wait: cfg.ClusterTimeout, log: log,
		answers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookgate_task_requests_total",
			Help: "Task API answers by outcome (created, replayed, in_flight, mismatch, invalid, refused, unavailable).",
		}, []string{"outcome"})}
	if reg != nil {
		reg.MustRegister(h.answers)
	}
	if h.notify == nil {
		h.notify = func() {}
	}
	return h
}

// Register mounts the API. The /v1 middleware of package admin
// authenticates; a task belongs to the token that submitted it (an
// operator's too), and its Idempotency-Key is scoped to that token.
func (h *Handler) Register(r fiber.Router) {
	r.Post("/v1/tasks", h.create)
	r.Get("/v1/tasks/:id", h.get)
}

// request is the body of POST /v1/tasks.
type request struct {
	URL         string            `json:"url"`
	Method      string            `json:"method"`
	Headers     map[string]string `json:"headers"`
	Body        json.RawMessage   `json:"body"`
	BodyBase64  *string           `json:"body_base64"`
	ContentType string            `json:"content_type"`
	// IdempotencyKey, if set, is sent downstream in place of the derived
	// key.
	IdempotencyKey *string `json:"idempotency_key"`
}

// Task is a task as the API shows it.
type Task struct {
	ID             string          `json:"id"`
	State          string          `json:"state"` // queued, delivering, succeeded, dead
	URL            string          `json:"url"`
	Method         string          `json:"method"`
	CreatedAt      time.Time       `json:"created_at"`
	DeliveryID     string          `json:"delivery_id,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	Attempts       int             `json:"attempts"`
	LastStatus     int             `json:"last_status,omitempty"`
	LastError      string          `json:"last_error,omitempty"`
	NextAttemptAt  time.Time       `json:"next_attempt_at,omitzero"`
	AttemptList    []store.Attempt `json:"attempt_list,omitempty"`
}

func (h *Handler) fail(outcome string, status int, code, msg string) error {
	h.answers.WithLabelValues(outcome).Inc()
	return httperror.New(status, code, msg)
}

// admit reads and checks what create needs before the key is claimed:
// the Idempotency-Key, and the request within its limits. A refusal takes
// no key.
// canon is the request as stored, which its fingerprint hashes.
func (h *Handler) admit(c *fiber.Ctx) (key string, tr *store.TaskRequest, canon []byte, err error) {
	key = c.Get("Idempotency-Key")
	switch {
	case key == "":
		return "", nil, nil, h.fail("invalid", http.StatusBadRequest, "missing_idempotency_key", "the Idempotency-Key header is required")
	case len(key) > MaxKeyLen || !printable(key):
		return "", nil, nil, h.fail("invalid", http.StatusBadRequest, "invalid_idempotency_key",
			fmt.Sprintf("Idempotency-Key must be at most %d printable ASCII characters", MaxKeyLen))
	case len(c.Request().Header.PeekAll("Idempotency-Key")) > 1:
		// Its lines would be one list, not the one key (an intermediary
		// may take another line than this handler).
		return "", nil, nil, h.fail("invalid", http.StatusBadRequest, "invalid_idempotency_key",
			"Idempotency-Key must be given once")
	}
	key = strings.Clone(key)
	if len(c.Body()) > h.maxBody {
		return "", nil, nil, h.fail("invalid", http.StatusRequestEntityTooLarge, "body_too_large",
			fmt.Sprintf("body is larger than %d bytes", h.maxBody))
	}
	tr, perr := parse(c.Body())
	if perr != nil {
		return "", nil, nil, h.fail("invalid", perr.Status, perr.Code, perr.Message)
	}
	canon, _ = json.Marshal(tr) // map keys are sorted by encoding/json
	if limit := h.maxStored; len(canon) > limit {
		return "", nil, nil, h.fail("invalid", http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf(
			"the task as stored is larger than %d bytes: its body is stored base64-encoded, its URL and header values JSON-escaped (<, > and & take 6 bytes each)", limit))
	}
	return key, tr, canon, nil
}

func (h *Handler) create(c *fiber.Ctx) error {
	key, tr, canon, err := h.admit(c)
	if err != nil {
		return err
	}
	caller, ok := admin.CallerOf(c)
	if !ok {
		return httperror.New(http.StatusUnauthorized, "unauthorized", "a valid bearer token is required")
	}
	scope := caller.Scope
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	fp := fingerprintOf(canon)
	outcome, ans, cerr := h.store.ClaimKey(ctx, scope, key, fp, h.keyTTL, abandonAfter)
	if cerr != nil {
		return h.unavailable(c, cerr)
	}
	switch outcome {
	case store.KeyInFlight:
		c.Set(fiber.HeaderRetryAfter, "1")
		return h.fail("in_flight", http.StatusConflict, "idempotency_key_in_flight",
			"a request with this Idempotency-Key is still being processed; retry later")
	case store.KeyMismatch:
		return h.mismatch()
	case store.KeyReplay:
		h.answers.WithLabelValues("replayed").Inc()
		c.Set("Idempotent-Replayed", "true")
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Status(ans.Status).Send(ans.Response)
	}

	// The key is ours: vet the destination, then store the task. A name
	// that does not resolve now (DNS may fail for a moment) is queued: the
	// dial-time check resolves it again and refuses a forbidden address.
	if err := h.policy.CheckURL(ctx, tr.URL); err != nil {
		switch {
		case errors.Is(err, egress.ErrNotAllowed):
			h.release(scope, key)
			h.log.Warn("task refused: destination not allowed", "err", err)
			return h.fail("refused", http.StatusUnprocessableEntity, "destination_not_allowed", err.Error())
		case errors.Is(err, egress.ErrBadURL):
			h.release(scope, key)
			return h.fail("invalid", http.StatusUnprocessableEntity, "invalid_url", err.Error())
		}
		h.log.Info("task destination does not resolve yet; queued, checked when dialled", "host", hostOf(tr.URL), "err", err)
	}
	id := newID()
	cctx := ctx // the cluster's requests: within ClusterTimeout in all
	if h.cluster != nil {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, h.wait)
		defer cancel()
		id = TaskID(scope, key)
		if answered, err := h.sameTask(ctx, cctx, c, scope, key, id, fp); answered {
			return err
		}
	}
	now := time.Now()
	task := Task{ID: id, State: "queued", URL: tr.URL, Method: tr.Method, CreatedAt: now.UTC()}
	task.IdempotencyKey = sentKey(tr, task.ID)
	body, _ := json.Marshal(tr) // the bytes fingerprint hashes
	resp, _ := json.Marshal(task)
	ev := &store.Event{ID: task.ID, Type: "task", ContentType: fiber.MIMEApplicationJSON, Body: body, ReceivedAt: now}
	if answered, err := h.createTask(ctx, cctx, c, ev, scope, key, fp, resp); answered {
		return err
	}
	answer := "created"
	if h.cluster != nil {
		var err error
		if answer, err = h.claim(ctx, cctx, c, ev, scope, key, fp); err != nil {
			return err
		}
	}
	h.notify()
	h.answers.WithLabelValues(answer).Inc()
	h.log.Info("task created", "task_id", task.ID, "method", tr.Method, "host", hostOf(tr.URL))
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Status(http.StatusAccepted).Send(resp)
}

// createTask stores the task; answered is true when the request has been
// answered instead (an error, or in cluster mode the same task another
// gateway created under this key, whose record reached this store since
// sameTask looked).
func (h *Handler) createTask(ctx, cctx context.Context, c *fiber.Ctx, ev *store.Event, scope, key, fp string, resp []byte) (answered bool, err error) {
	err = h.store.CreateTask(ctx, ev, scope, key, http.StatusAccepted, resp)
	if err == nil {
		return false, nil
	}
	if errors.Is(err, store.ErrTaskExists) && h.cluster != nil {
		if answered, aerr := h.sameTask(ctx, cctx, c, scope, key, ev.ID, fp); answered {
			return true, aerr
		}
	}
	h.release(scope, key)
	return true, h.unavailable(c, err)
}

// TaskID is a task's ID in cluster mode: derived from (scope, key), the
// same on every gateway.
func TaskID(scope, key string) string {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(scope))) // no (scope, key) pair reads as another
	h.Write(n[:])
	h.Write([]byte(scope))
	h.Write([]byte(key))
	return "task_" + hex.EncodeToString(h.Sum(nil)[:12])
}

// sameTask answers, in cluster mode, a request whose task (id) exists
// already: stored here (the key expired here, the task not: the same
// request is answered with the task, another 422), or held by another
// gateway with another request (422). answered is false when the task is
// to be stored here: new, held elsewhere for the same request (this
// gateway's copy is then never published), or the cluster did not answer
// within cctx.
func (h *Handler) sameTask(ctx, cctx context.Context, c *fiber.Ctx, scope, key, id, fp string) (answered bool, err error) {
	ev, err := h.store.GetEvent(ctx, store.TaskSource, id)
	switch {
	case err == nil:
		h.release(scope, key)
		if cluster.Digest(ev) != fp {
			return true, h.mismatch()
		}
		var tr store.TaskRequest
		if err := json.Unmarshal(ev.Body, &tr); err != nil {
			return true, fmt.Errorf("task %s: stored request: %w", id, err)
		}
		task := Task{ID: id, State: "queued", URL: tr.URL, Method: tr.Method, CreatedAt: ev.ReceivedAt.UTC(),
			IdempotencyKey: sentKey(&tr, id)}
		h.answers.WithLabelValues("replayed").Inc()
		c.Set("Idempotent-Replayed", "true")
		return true, c.Status(http.StatusAccepted).JSON(task)
	case !errors.Is(err, store.ErrNotFound):
		h.release(scope, key)
		return true, h.unavailable(c, err)
	}
	o, found, err := h.cluster.Holder(cctx, store.TaskSource, id)
	if err == nil && found && o.Digest != "" && o.Digest != fp {
		h.release(scope, key)
		return true, h.mismatch()
	}
	return false, nil
}

// claim claims ev, the task just stored here as request fp, in the
// cluster (within cctx). answer is "created" when this gateway holds it,
// or the cluster did not answer (the relay claims before publishing), and
// "replayed" when another gateway holds it for the same request. Held
// elsewhere for another request (one key used at once on two gateways),
// this gateway's copy is undone and err is the 422.
func (h *Handler) claim(ctx, cctx context.Context, c *fiber.Ctx, ev *store.Event, scope, key, fp string) (answer string, err error) {
	holder, err := h.cluster.ClaimAtIntake(cctx, ev)
	if err != nil || holder == "" {
		return "created", nil
	}
	o, found, err := h.cluster.Holder(cctx, store.TaskSource, ev.ID)
	if err == nil && found && o.Digest != "" && o.Digest != fp {
		err := h.store.DropTask(ctx, ev.ID, scope, key, fp)
		if err == nil {
			return "", h.mismatch()
		}
		h.log.Warn("task key used at once on two gateways with different requests; the other gateway's is delivered, and this one's answer could not be undone",
			"task_id", ev.ID, "holder", holder, "err", err)
	}
	c.Set("Idempotent-Replayed", "true")
	return "replayed", nil
}

func (h *Handler) mismatch() error {
	return h.fail("mismatch", http.StatusUnprocessableEntity, "idempotency_key_mismatch",
		"this Idempotency-Key was used with a different request")
}

func (h *Handler) release(scope, key string) {
	if err := h.store.ReleaseKey(context.Background(), scope, key); err != nil {
		h.log.Warn("cannot release idempotency key; it expires on its own", "err", err)
	}
}

func (h *Handler) unavailable(c *fiber.Ctx, err error) error {
	h.log.Error("task store unavailable", "err", err)
	c.Set(fiber.HeaderRetryAfter, "1")
	return h.fail("unavailable", http.StatusServiceUnavailable, "store_unavailable", "the task could not be stored; retry later")
}

func (h *Handler) get(c *fiber.Ctx) error {
	id := c.Params("id")
	ctx := c.UserContext()
	caller, ok := admin.CallerOf(c)
	if !ok {
		return httperror.New(http.StatusUnauthorized, "unauthorized", "a valid bearer token is required")
	}
	// An operator reads any task, a task client its own.
	scope, err := h.store.TaskScope(ctx, id)
	if errors.Is(err, store.ErrNotFound) ||
		(err == nil && !caller.Operator && subtle.ConstantTimeCompare([]byte(scope), []byte(caller.Scope)) != 1) {
		return httperror.New(http.StatusNotFound, "not_found", "no such task")
	}
	if err != nil {
		return httperror.New(http.StatusServiceUnavailable, "store_unavailable", "the store is unavailable; retry later")
	}
	ev, err := h.store.GetEvent(ctx, store.TaskSource, id)
	if err != nil {
		return httperror.New(http.StatusServiceUnavailable, "store_unavailable", "the store is unavailable; retry later")
	}
	var tr store.TaskRequest
	if err := json.Unmarshal(ev.Body, &tr); err != nil {
		return fmt.Errorf("task %s: stored request: %w", id, err)
	}
	t := Task{ID: id, State: "queued", URL: tr.URL, Method: tr.Method, CreatedAt: ev.ReceivedAt.UTC(),
		IdempotencyKey: sentKey(&tr, id)}
	d, err := h.store.Delivery(ctx, outbound.TaskRoute, store.TaskSource, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return httperror.New(http.StatusServiceUnavailable, "store_unavailable", "the store is unavailable; retry later")
	default:
		t.DeliveryID, t.Attempts, t.LastStatus, t.LastError, t.NextAttemptAt = d.UID, d.Attempts, d.LastStatus, d.LastError, d.NextAttemptAt
		switch d.State {
		case store.StateRetrying:
			t.State = "delivering"
		case store.StateSucceeded, store.StateDead:
			t.State = d.State
		}
		if t.AttemptList, err = h.store.Attempts(ctx, d.ID); err != nil {
			return httperror.New(http.StatusServiceUnavailable, "store_unavailable", "the store is unavailable; retry later")
		}
	}
	return c.JSON(t)
}

// sentKey is the Idempotency-Key task id's requests carry: the task's
// own, else the derived one.
func sentKey(tr *store.TaskRequest, id string) string {
	if tr.IdempotencyKey != "" {
		return tr.IdempotencyKey
	}
	return outbound.IdempotencyKey(outbound.TaskRoute, store.TaskSource, id)
}

func newID() string {
	var b [12]byte
	rand.Read(b[:])
	return "task_" + hex.EncodeToString(b[:])
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Host
}

// storedSlack is what a stored task may take beyond four thirds of
// tasks.max_body: the fields it adds (method, content type), so that a
// request at the limit fits. jetstream.HeaderRoom has room for it.
const storedSlack = 1 << 10

// fingerprint is a hash of the canonical request: equal for requests that
// would make the same task. The canonical form is the task as stored (its
// JSON): the broker's max payload leaves it four thirds of tasks.max_body
// (app's checkPayload: a body travels base64-encoded), but the JSON
// escapes <, > and & in the URL and header values as six bytes each.
func fingerprint(tr *store.TaskRequest) string {
	canon, _ := json.Marshal(tr) // map keys are sorted by encoding/json
	return fingerprintOf(canon)
}

// fingerprintOf is the fingerprint of a canonical request.
func fingerprintOf(canon []byte) string {
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:])
}

var methods = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "DELETE": true, "GET": true}

// reserved headers are set by hookgate or by the HTTP client.
var reserved = map[string]bool{
	"host": true, "content-length": true, "transfer-encoding": true, "connection": true, "upgrade": true,
	"te": true, "trailer": true, "keep-alive": true, "proxy-authorization": true, "proxy-connection": true,
	"idempotency-key": true, "user-agent": true, "webhook-id": true, "webhook-timestamp": true,
	"webhook-signature": true, "content-type": true,
}

// parse validates a task request into what is stored.
func parse(body []byte) (*store.TaskRequest, *httperror.Error) {
	r, herr := decode(body)
	if herr != nil {
		return nil, herr
	}
	if r.URL == "" {
		return nil, invalid("invalid_url", "url is required")
	}
	u, err := url.Parse(r.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, invalid("invalid_url", "url must be an absolute http:// or https:// URL")
	}
	tr := &store.TaskRequest{URL: r.URL, Method: strings.ToUpper(r.Method), ContentType: r.ContentType}
	if tr.Method == "" {
		tr.Method = http.MethodPost
	}
	if !methods[tr.Method] {
		return nil, invalid("invalid_method", "method must be POST, PUT, PATCH, DELETE or GET")
	}
	if tr.Headers, herr = parseHeaders(r.Headers); herr != nil {
		return nil, herr
	}
	if herr := parseBody(r, tr); herr != nil {
		return nil, herr
	}
	if !httpguts.ValidHeaderFieldValue(tr.ContentType) {
		return nil, invalid("invalid_task", "content_type has control characters")
	}
	if r.IdempotencyKey != nil {
		k := *r.IdempotencyKey
		if k == "" || len(k) > MaxKeyLen || !printable(k) || k[0] == ' ' || k[len(k)-1] == ' ' {
			return nil, invalid("invalid_idempotency_key",
				"idempotency_key must be 1 to %d printable ASCII characters, without a space at either end", MaxKeyLen)
		}
		tr.IdempotencyKey = k
	}
	return tr, nil
}

func invalid(code, format string, args ...any) *httperror.Error {
	return httperror.New(http.StatusUnprocessableEntity, code, fmt.Sprintf(format, args...))
}

// decode reads the body as one request object with no unknown fields.
func decode(body []byte) (*request, *httperror.Error) {
	var r request
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, httperror.New(http.StatusBadRequest, "malformed_json", "body is not valid JSON")
		}
		return nil, invalid("invalid_task", "%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return nil, httperror.New(http.StatusBadRequest, "malformed_json", "body is not one JSON object")
	}
	return &r, nil
}

// parseHeaders checks the task's headers and canonicalizes their names;
// nil when there are none.
func parseHeaders(headers map[string]string) (map[string]string, *httperror.Error) {
	for name, v := range headers {
		switch {
		case !httpguts.ValidHeaderFieldName(name):
			return nil, invalid("invalid_header", "header name %q is not valid", name)
		case reserved[strings.ToLower(name)] || strings.HasPrefix(strings.ToLower(name), "x-hookgate-"):
			return nil, invalid("invalid_header", "header %q is set by hookgate", name)
		case strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }):
			return nil, invalid("invalid_header", "header %q has control characters", name)
		}
	}
	if len(headers) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(headers))
	for k, v := range headers {
		ck := http.CanonicalHeaderKey(k)
		if _, twice := out[ck]; twice {
			// Which value won would follow Go's map order: the request's
			// fingerprint, and what is sent, would change between tries.
			return nil, invalid("invalid_header", "header %q is given twice (names are case-insensitive)", ck)
		}
		out[ck] = v
	}
	return out, nil
}

// parseBody sets the task's body from body (JSON, compacted) or
// body_base64, and its content type's default.
func parseBody(r *request, tr *store.TaskRequest) *httperror.Error {
	hasBody := len(r.Body) > 0 && !bytes.Equal(r.Body, []byte("null"))
	switch {
	case hasBody && r.BodyBase64 != nil:
		return invalid("invalid_task", "body and body_base64 are exclusive")
	case hasBody:
		var compact bytes.Buffer
		// The decoder has checked the JSON already.
		if err := json.Compact(&compact, r.Body); err != nil {
			return httperror.New(http.StatusBadRequest, "malformed_json", "body is not valid JSON")
		}
		tr.Body = compact.Bytes()
		if tr.ContentType == "" {
			tr.ContentType = "application/json"
		}
	case r.BodyBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*r.BodyBase64)
		if err != nil {
			return invalid("invalid_task", "body_base64 is not valid base64")
		}
		tr.Body = b
		if tr.ContentType == "" {
			tr.ContentType = "application/octet-stream"
		}
	}
	return nil
}
