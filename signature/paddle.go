package signature

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"time"
)

// HeaderPaddleSignature is the header carrying Paddle's signature.
const HeaderPaddleSignature = "Paddle-Signature"

var (
	errPaddleMissing     = fmt.Errorf("%w: no paddle-signature header", ErrMissing)
	errPaddleElement     = fmt.Errorf("%w: paddle-signature element is not key=value", ErrMalformed)
	errPaddleNoTimestamp = fmt.Errorf("%w: paddle-signature has no ts= timestamp", ErrMalformed)
	errPaddleDupTime     = fmt.Errorf("%w: paddle-signature has more than one ts= timestamp", ErrMalformed)
	errPaddleBadTime     = fmt.Errorf("%w: paddle-signature ts= is not unix seconds", ErrMalformed)
	errPaddleNoH1        = fmt.Errorf("%w: paddle-signature has no valid h1 signature", ErrMismatch)
	errPaddleMismatch    = fmt.Errorf("%w: no paddle h1 signature matches a configured secret", ErrMismatch)
)

// maxPaddleH1 bounds the h1 values read from one header: Paddle sends one,
// two while a secret is rotated.
const maxPaddleH1 = 8

// Paddle verifies Paddle Billing's "Paddle-Signature: ts=<unix>;h1=<hex>"
// header: h1 is hex(HMAC-SHA256(secret, ts + ":" + body)) keyed with the
// endpoint's secret key ("pdl_ntfset_..."), taken as it is. While a secret
// is rotated the header carries an h1 per secret.
//
// Elements are separated by ";" (optional whitespace around them is
// ignored) and split at their first "=". Exactly one ts is required.
// Unknown keys are ignored, as are h1 values that are not 64 hex digits and
// those past the eighth; a header with no valid h1 yields ErrMismatch. An
// element without "=" (including an empty one) yields ErrMalformed.
type Paddle struct {
	keys      []*macKey
	tolerance time.Duration
}

// NewPaddle returns a Paddle verifier accepting any of secrets, with
// timestamps at most tolerance (> 0) away from now.
func NewPaddle(secrets []string, tolerance time.Duration) (*Paddle, error) {
	if err := checkTolerance(tolerance); err != nil {
		return nil, err
	}
	keys, err := newKeys(secrets, sha256.New)
	if err != nil {
		return nil, err
	}
	return &Paddle{keys: keys, tolerance: tolerance}, nil
}

// Verify implements Verifier.
func (p *Paddle) Verify(h Header, body []byte, now time.Time) error {
	var buf [2][sha256.Size]byte
	ts, sigs, err := parsePaddle(h(HeaderPaddleSignature), buf[:0])
	if err != nil {
		return err
	}
	if len(sigs) == 0 {
		return errPaddleNoH1
	}
	if !p.match(ts, sigs, body) {
		return errPaddleMismatch
	}
	return checkTimestamp(now, ts, p.tolerance)
}

func (p *Paddle) match(ts int64, sigs [][sha256.Size]byte, body []byte) bool {
	for _, k := range p.keys {
		m := k.get()
		b := appendInt(m.buf[:0], ts)
		b = append(b, ':')
		m.h.Write(b)
		m.h.Write(body)
		ok := equalsAny(m.sumOf(), sigs)
		k.put(m)
		if ok {
			return true
		}
	}
	return false
}

// parsePaddle parses a Paddle-Signature value. It returns the ts value and
// appends the decoded valid h1 signatures (at most maxPaddleH1) to sigs.
func parsePaddle(v string, sigs [][sha256.Size]byte) (int64, [][sha256.Size]byte, error) {
	if v == "" {
		return 0, sigs, errPaddleMissing
	}
	var ts int64
	haveT := false
	h1s := 0
	for rest, more := v, true; more; {
		var item string
		item, rest, more = strings.Cut(rest, ";")
		key, val, ok := strings.Cut(trimOWS(item), "=")
		if !ok {
			return 0, sigs, errPaddleElement
		}
		switch key {
		case "ts":
			if haveT {
				return 0, sigs, errPaddleDupTime
			}
			if ts, ok = parseUnix(val); !ok {
				return 0, sigs, errPaddleBadTime
			}
			haveT = true
		case "h1":
			var sig [sha256.Size]byte
			if h1s < maxPaddleH1 && decodeHex(sig[:], val) {
				sigs = append(sigs, sig)
				h1s++
			}
		}
	}
	if !haveT {
		return 0, sigs, errPaddleNoTimestamp
	}
	return ts, sigs, nil
}

func init() {
	Register(Scheme{
		Name: "paddle",
		ID:   Location{Field: "event_id"}, Type: Location{Field: "event_type"},
		New: func(p Params) (Verifier, error) { return NewPaddle(p.Secrets, p.Tolerance) },
	})
}
