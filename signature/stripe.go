package signature

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"time"
)

// HeaderStripeSignature is the header carrying Stripe's signature.
const HeaderStripeSignature = "Stripe-Signature"

var (
	errStripeMissing     = fmt.Errorf("%w: no stripe-signature header", ErrMissing)
	errStripeElement     = fmt.Errorf("%w: stripe-signature element is not key=value", ErrMalformed)
	errStripeNoTimestamp = fmt.Errorf("%w: stripe-signature has no t= timestamp", ErrMalformed)
	errStripeDupTime     = fmt.Errorf("%w: stripe-signature has more than one t= timestamp", ErrMalformed)
	errStripeBadTime     = fmt.Errorf("%w: stripe-signature t= is not unix seconds", ErrMalformed)
	errStripeNoV1        = fmt.Errorf("%w: stripe-signature has no valid v1 signature", ErrMismatch)
	errStripeMismatch    = fmt.Errorf("%w: no stripe v1 signature matches a configured secret", ErrMismatch)
)

// Stripe verifies Stripe's "Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>]..."
// header: v1 is hex(HMAC-SHA256(secret, t + "." + body)), keyed with the
// secret's raw bytes (the whole "whsec_..." string, as Stripe does).
//
// Elements are separated by "," (optional whitespace around them is
// ignored) and split at their first "=". Exactly one t is required. Unknown
// keys (v0, ...) are ignored, as are v1 values that are not 64 hex digits;
// a header with no valid v1 yields ErrMismatch. An element without "=" or
// with an empty key (including empty elements, e.g. a trailing comma)
// yields ErrMalformed, like Stripe's own library.
type Stripe struct {
	keys      []*macKey
	tolerance time.Duration
}

// NewStripe returns a Stripe verifier accepting any of secrets, with
// timestamps at most tolerance (> 0) away from now.
func NewStripe(secrets []string, tolerance time.Duration) (*Stripe, error) {
	if err := checkTolerance(tolerance); err != nil {
		return nil, err
	}
	keys, err := newKeys(secrets, sha256.New)
	if err != nil {
		return nil, err
	}
	return &Stripe{keys: keys, tolerance: tolerance}, nil
}

// Verify implements Verifier.
func (s *Stripe) Verify(h Header, body []byte, now time.Time) error {
	v := h(HeaderStripeSignature)
	var buf [4][sha256.Size]byte // most headers carry one or two v1s
	ts, sigs, err := parseStripe(v, buf[:0])
	if err != nil {
		return err
	}
	if len(sigs) == 0 {
		return errStripeNoV1
	}
	if !s.match(ts, sigs, body) {
		return errStripeMismatch
	}
	return checkTimestamp(now, ts, s.tolerance)
}

func (s *Stripe) match(ts int64, sigs [][sha256.Size]byte, body []byte) bool {
	for _, k := range s.keys {
		m := k.get()
		m.writeUnixDot(ts)
		m.h.Write(body)
		ok := equalsAny(m.sumOf(), sigs)
		k.put(m)
		if ok {
			return true
		}
	}
	return false
}

// parseStripe parses a Stripe-Signature value. It returns the t value and
// appends the decoded valid v1 signatures to sigs.
func parseStripe(v string, sigs [][sha256.Size]byte) (int64, [][sha256.Size]byte, error) {
	if v == "" {
		return 0, sigs, errStripeMissing
	}
	var ts int64
	haveT := false
	for rest, more := v, true; more; {
		var item string
		item, rest, more = strings.Cut(rest, ",")
		key, val, ok := strings.Cut(trimOWS(item), "=")
		if !ok { // an empty key is ignored, as Stripe does
			return 0, sigs, errStripeElement
		}
		switch key {
		case "t":
			if haveT {
				return 0, sigs, errStripeDupTime
			}
			if ts, ok = parseUnix(val); !ok {
				return 0, sigs, errStripeBadTime
			}
			haveT = true
		case "v1":
			var sig [sha256.Size]byte
			if decodeHex(sig[:], val) {
				sigs = append(sigs, sig)
			}
		}
	}
	if !haveT {
		return 0, sigs, errStripeNoTimestamp
	}
	return ts, sigs, nil
}

func init() {
	Register(Scheme{
		Name: "stripe",
		ID:   Location{Field: "id"}, Type: Location{Field: "type"},
		New: func(p Params) (Verifier, error) { return NewStripe(p.Secrets, p.Tolerance) },
	})
}
