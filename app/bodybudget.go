package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
	"golang.org/x/sync/semaphore"

	"github.com/hookgate/hookgate/httperror"
)

// The server streams request bodies (fiber's StreamRequestBody): it reads
// at most prefetchBytes of a body before the handlers run, instead of
// reserving the declared Content-Length up front. bodyBudget then reads the
// rest, within a budget of body bytes held at once.
const prefetchBytes = 8 << 10

// bodyWait is how long a body waits for room in the budget before it is
// answered 503.
const bodyWait = 2 * time.Second

// bodyBudget reads each request's body before the handlers run, so they
// see it whole (c.Body()), and bounds the bytes of bodies held at once:
//
//   - a declared length over limit (the largest any endpoint takes) is
//     answered 413 body_too_large as soon as the body's first bytes
//     arrived (headerReceived), a chunked body as soon as it passes limit;
//   - a body longer than what the server prefetched takes room in the
//     budget as it arrives: each time its buffer grows (from
//     prefetchBytes, doubling, never past its declared length or limit),
//     waiting up to bodyWait for the room (holding none meanwhile), else
//     503 server_busy with Retry-After. A sender holds at most twice what
//     it sent, not its declared length. The room is given back once the
//     handler returns;
//   - a body with a Content-Encoding takes limit in all (decodeContent,
//     next, decodes it up to limit bytes) once it has arrived whole, and
//     a brotli coding its decoder's window (decoderRoom); one that could
//     never fit the budget is 415 unsupported_content_encoding.
//
// The whole request must arrive within the server's read timeout. A body
// refused before it was read closes the connection once the answer is
// sent (what follows it cannot be told apart from a next request).
type bodyBudget struct {
	log    *slog.Logger
	sem    *semaphore.Weighted
	memory int
	limit  int
	wait   time.Duration
	held   atomic.Int64 // bytes taken from sem
	busy   atomic.Int64 // requests refused for want of room
}

func newBodyBudget(memory, limit int, log *slog.Logger) *bodyBudget {
	return &bodyBudget{log: log, sem: semaphore.NewWeighted(int64(memory)), memory: memory, limit: limit, wait: bodyWait}
}

func (b *bodyBudget) handle(c *fiber.Ctx) error {
	req := c.Request()
	coded := contentCoded(c)
	if !req.IsBodyStream() && !coded {
		return c.Next()
	}
	cl := req.Header.ContentLength()
	if cl > b.limit {
		return refuseUnread(c, b.log, httperror.New(http.StatusRequestEntityTooLarge, "body_too_large",
			"body is larger than "+strconv.Itoa(b.limit)+" bytes"))
	}
	room := &reservation{b: b}
	defer room.release()
	if req.IsBodyStream() {
		body, err := readBody(req.BodyStream(), cl, b.limit, room.grow)
		if err != nil {
			return refuseUnread(c, b.log, b.bodyError(c, err, cl == -1))
		}
		req.SetBodyRaw(body)
	}
	if coded {
		need := b.limit + decoderRoom(contentEncoding(req), req.Body())
		if need > b.memory {
			return refuseUnread(c, b.log, httperror.New(http.StatusUnsupportedMediaType, "unsupported_content_encoding",
				"the body's decoder needs "+strconv.Itoa(need)+" bytes, more than http.body_memory; use a smaller brotli window"))
		}
		if err := room.grow(need); err != nil {
			return refuseUnread(c, b.log, b.bodyError(c, err, false))
		}
	}
	return c.Next()
}

// maxBrotliWindow is the largest window a brotli stream may declare
// (RFC 7932: WBITS 24).
const maxBrotliWindow = 1 << 24

// decoderRoom is the memory a body's decoders may take beside the decoded
// body: a brotli stream's ring buffer, up to its window, whatever the
// body's length (a 52-byte stream can make the decoder take 16 MiB). The
// window is read from the stream's first bits when it is decoded first,
// else taken as the largest. gzip and deflate keep a fixed 32 KiB.
func decoderRoom(header string, raw []byte) int {
	codings := strings.Split(header, ",")
	if len(codings) > maxCodings {
		return 0 // refused by decodeContent
	}
	room := 0
	for i, coding := range codings {
		if !strings.EqualFold(strings.TrimSpace(coding), "br") {
			continue
		}
		if i == len(codings)-1 {
			room += brotliWindow(raw)
		} else {
			room += maxBrotliWindow
		}
	}
	return room
}

// brotliWindow is the window size a brotli stream declares in its first
// bits (RFC 7932 section 9.1, WBITS); the largest for what is not one.
func brotliWindow(stream []byte) int {
	if len(stream) == 0 {
		return maxBrotliWindow
	}
	b := stream[0]
	if b&1 == 0 {
		return 1 << 16
	}
	if n := (b >> 1) & 7; n != 0 {
		return 1 << (17 + n)
	}
	switch m := (b >> 4) & 7; m {
	case 0:
		return 1 << 17
	case 1: // reserved (large windows)
		return maxBrotliWindow
	default:
		return 1 << (8 + m)
	}
}

// errBusy is a body that found no room in the budget within bodyWait.
var errBusy = errors.New("no room for the body")

// reservation is the room one request's body holds in the budget.
type reservation struct {
	b    *bodyBudget
	held int64
}

// grow makes the room held at least n bytes, waiting up to bodyWait. A
// body of at most prefetchBytes takes none: the server holds that much of
// every request anyway. A body that must wait gives back what it holds
// and waits for all n at once: bodies that each held part of the budget
// while waiting for more would wait for each other.
func (r *reservation) grow(n int) error {
	if n <= prefetchBytes {
		return nil
	}
	more := int64(n) - r.held
	if more <= 0 {
		return nil
	}
	if !r.b.sem.TryAcquire(more) {
		r.release()
		more = int64(n)
		ctx, cancel := context.WithTimeout(context.Background(), r.b.wait)
		err := r.b.sem.Acquire(ctx, more)
		cancel()
		if err != nil {
			return errBusy
		}
	}
	r.held += more
	r.b.held.Add(more)
	return nil
}

func (r *reservation) release() {
	if r.held > 0 {
		r.b.held.Add(-r.held)
		r.b.sem.Release(r.held)
		r.held = 0
	}
}

// headerReceived is the server's hook between a request's headers and its
// body. A declared length over limit is refused once the first byte of
// the body arrived, not after the server prefetched its usual 8 KiB.
func (b *bodyBudget) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	if h.ContentLength() > b.limit {
		return fasthttp.RequestConfig{MaxRequestBodySize: 1}
	}
	return fasthttp.RequestConfig{}
}

// errBodyTooLarge is a chunked body that passed the limit.
var errBodyTooLarge = errors.New("body too large")

// readBody reads r whole: cl bytes if cl >= 0, else at most limit. Its
// buffer grows with what arrived, at most doubling, never past cl; grow is
// asked for room for each size the buffer takes before it is allocated.
func readBody(r io.Reader, cl, limit int, grow func(int) error) ([]byte, error) {
	most := cl
	if cl < 0 {
		most = limit
	}
	size := min(most, prefetchBytes)
	if err := grow(size); err != nil {
		return nil, err
	}
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			if len(buf) >= most {
				if cl < 0 {
					return buf, endsHere(r)
				}
				return buf, nil
			}
			size := min(2*cap(buf), most)
			if err := grow(size); err != nil {
				return nil, err
			}
			nb := make([]byte, len(buf), size)
			copy(nb, buf)
			buf = nb
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			if cl >= 0 && len(buf) < cl {
				return nil, io.ErrUnexpectedEOF
			}
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
		if cl >= 0 && len(buf) == cl {
			return buf, nil
		}
	}
}

// endsHere is nil if r has nothing more, errBodyTooLarge if it has.
func endsHere(r io.Reader) error {
	var probe [1]byte
	for {
		n, err := r.Read(probe[:])
		switch {
		case n > 0:
			return errBodyTooLarge
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return err
		}
	}
}

// bodyError is the answer to a body that could not be read, or found no
// room.
func (b *bodyBudget) bodyError(c *fiber.Ctx, err error, chunked bool) *httperror.Error {
	if errors.Is(err, errBusy) {
		b.busy.Add(1)
		c.Set(fiber.HeaderRetryAfter, "2")
		return httperror.New(http.StatusServiceUnavailable, "server_busy",
			"too many request bodies in flight; retry later")
	}
	if errors.Is(err, errBodyTooLarge) {
		return httperror.New(http.StatusRequestEntityTooLarge, "body_too_large",
			"body is larger than "+strconv.Itoa(b.limit)+" bytes")
	}
	e := httperror.Classify(err)
	if chunked && e.Code == "bad_request" && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		// What the chunk parser refuses is not always an ErrBrokenChunk.
		return httperror.New(http.StatusBadRequest, "bad_chunked_encoding", "malformed chunked body")
	}
	return e
}

// refuseUnread answers e to a request whose body was not read (whole):
// the connection closes after the answer, lingering so the client reads it.
func refuseUnread(c *fiber.Ctx, log *slog.Logger, e *httperror.Error) error {
	log.Warn("request refused", "method", c.Method(), "path", c.Path(), "remote", c.IP(),
		"status", e.Status, "code", e.Code)
	c.Context().SetConnectionClose()
	if tc, ok := c.Context().Conn().(*trackedConn); ok {
		tc.lingerOnClose()
	}
	return e
}
