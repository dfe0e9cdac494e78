package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"math"
	"sync"
	"time"
)

// Header returns a request header's value, "" if absent. Lookup is
// case-insensitive (the caller's job).
type Header func(name string) string

// Sentinel errors. Every error returned by a Verify method wraps one of them.
var (
	ErrMissing   = errors.New("missing signature")          // signature header(s) absent
	ErrMalformed = errors.New("malformed signature header") // unparsable header / timestamp
	ErrMismatch  = errors.New("no signature matches")       // parsed fine but no secret matches
	ErrTimestamp = errors.New("timestamp outside tolerance")
)

// Verifier checks a request's signature over the raw body.
type Verifier interface {
	Verify(h Header, body []byte, now time.Time) error
}

// None accepts every request. Use it only for sources that are not signed.
type None struct{}

// Verify always returns nil.
func (None) Verify(Header, []byte, time.Time) error { return nil }

var (
	_ Verifier = None{}
	_ Verifier = (*Stripe)(nil)
	_ Verifier = (*Standard)(nil)
	_ Verifier = (*GitHub)(nil)
	_ Verifier = (*HMAC)(nil)
)

// macKey hands out keyed HMAC states for one secret. Keying an HMAC costs
// allocations and two compression-function calls, so states are pooled and
// Reset (which restores the keyed state) between uses.
type macKey struct {
	pool sync.Pool // of *macState
}

type macState struct {
	h   hash.Hash
	sum []byte   // capacity h.Size(), for Sum without allocating
	buf [64]byte // scratch: h.Write is an interface call, so its argument escapes; reuse this rather than allocate
}

func newMacKey(newHash func() hash.Hash, key []byte) *macKey {
	k := append([]byte(nil), key...)
	mk := &macKey{}
	mk.pool.New = func() any {
		h := hmac.New(newHash, k)
		return &macState{h: h, sum: make([]byte, 0, h.Size())}
	}
	return mk
}

func (k *macKey) get() *macState { return k.pool.Get().(*macState) }

func (k *macKey) put(m *macState) {
	m.h.Reset()
	k.pool.Put(m)
}

// writeString writes s to the hash through the scratch buffer, avoiding the
// allocation of a []byte(s) conversion.
func (m *macState) writeString(s string) {
	for len(s) > 0 {
		n := copy(m.buf[:], s)
		m.h.Write(m.buf[:n])
		s = s[n:]
	}
}

// writeUnixDot writes the decimal form of sec followed by ".".
func (m *macState) writeUnixDot(sec int64) {
	b := appendInt(m.buf[:0], sec)
	b = append(b, '.')
	m.h.Write(b)
}

// sumOf finishes the MAC. The result aliases m and is valid until put.
func (m *macState) sumOf() []byte { return m.h.Sum(m.sum[:0]) }

func appendInt(b []byte, v int64) []byte {
	if v < 0 {
		b = append(b, '-')
		if v == math.MinInt64 {
			return append(b, "9223372036854775808"...)
		}
		v = -v
	}
	var d [20]byte
	i := len(d)
	for {
		i--
		d[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	return append(b, d[i:]...)
}

// parseUnix parses canonical decimal Unix seconds: 1 to 19 ASCII digits, no
// sign, no leading zero (except "0" itself), no int64 overflow.
func parseUnix(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 19 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := int64(c - '0')
		if n > (math.MaxInt64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// maxUnix bounds accepted timestamps (about year 36812) so that time.Unix
// stays exact; larger values are far in the future for any sane clock.
const maxUnix = 1 << 40

var errTimestampFar = fmt.Errorf("%w: signed far in the future", ErrTimestamp)

// checkTimestamp reports ErrTimestamp if sec is more than tol away from now.
// A difference of exactly tol is accepted.
func checkTimestamp(now time.Time, sec int64, tol time.Duration) error {
	if sec > maxUnix { // time.Unix would overflow its internal representation
		return errTimestampFar
	}
	d := now.Sub(time.Unix(sec, 0)) // saturates, so far-off values compare correctly
	switch {
	case d > tol:
		return fmt.Errorf("%w: signed %s ago, tolerance %s", ErrTimestamp, roundDur(d), tol)
	case d < -tol:
		return fmt.Errorf("%w: signed %s in the future, tolerance %s", ErrTimestamp, roundDur(-d), tol)
	}
	return nil
}

func roundDur(d time.Duration) time.Duration {
	if d < 0 { // -MinInt64 overflowed
		return math.MaxInt64
	}
	return d.Truncate(time.Second)
}

func fromHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// decodeHex decodes s, which must be exactly 2*len(dst) hex digits (either
// case), into dst. The input is attacker-chosen, not secret, so this need
// not be constant time.
func decodeHex(dst []byte, s string) bool {
	if len(s) != 2*len(dst) {
		return false
	}
	for i := range dst {
		a, ok1 := fromHex(s[2*i])
		b, ok2 := fromHex(s[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = a<<4 | b
	}
	return true
}

// maxDigest is the largest digest size supported (SHA-512).
const maxDigest = 64

// b64 is padded standard base64 that rejects non-zero trailing bits, so
// each digest has exactly one accepted encoding.
var b64 = base64.StdEncoding.Strict()

// decodeBase64 decodes s, which must be the canonical padded standard
// base64 encoding of exactly len(dst) bytes (len(dst) <= maxDigest), into
// dst.
func decodeBase64(dst []byte, s string) bool {
	if len(s) != b64.EncodedLen(len(dst)) {
		return false
	}
	var src [(maxDigest + 2) / 3 * 4]byte
	var out [(maxDigest + 2) / 3 * 3]byte
	n := copy(src[:], s)
	// Decode ignores CR and LF; with the exact length check any of them
	// yields fewer bytes than wanted and is rejected below.
	m, err := b64.Decode(out[:], src[:n])
	if err != nil || m != len(dst) {
		return false
	}
	copy(dst, out[:m])
	return true
}

// newKeys validates secrets (non-empty list, non-empty entries) and keys an
// HMAC for each with its raw bytes.
func newKeys(secrets []string, newHash func() hash.Hash) ([]*macKey, error) {
	if len(secrets) == 0 {
		return nil, errors.New("signature: no secrets configured")
	}
	keys := make([]*macKey, len(secrets))
	for i, s := range secrets {
		if s == "" {
			return nil, fmt.Errorf("signature: secrets[%d]: empty secret", i)
		}
		keys[i] = newMacKey(newHash, []byte(s))
	}
	return keys, nil
}

func checkTolerance(tol time.Duration) error {
	if tol <= 0 {
		return fmt.Errorf("signature: tolerance must be positive, got %s", tol)
	}
	return nil
}

// isOWS reports whether c is HTTP optional whitespace.
func isOWS(c byte) bool { return c == ' ' || c == '\t' }

func trimOWS(s string) string {
	for len(s) > 0 && isOWS(s[0]) {
		s = s[1:]
	}
	for len(s) > 0 && isOWS(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}

func init() {
	Register(Scheme{
		Name: "none", Unsigned: true,
		New: func(Params) (Verifier, error) { return None{}, nil },
	})
}

// equalsAny reports whether sum equals one of sigs, each compared in
// constant time.
func equalsAny(sum []byte, sigs [][sha256.Size]byte) bool {
	for i := range sigs {
		if hmac.Equal(sum, sigs[i][:]) {
			return true
		}
	}
	return false
}
