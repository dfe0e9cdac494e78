package signature

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"strings"
	"time"
)

// Slack's request signing headers.
const (
	HeaderSlackSignature = "X-Slack-Signature"
	HeaderSlackTimestamp = "X-Slack-Request-Timestamp"
)

var (
	errSlackMissingSig  = fmt.Errorf("%w: no x-slack-signature header", ErrMissing)
	errSlackMissingTime = fmt.Errorf("%w: no x-slack-request-timestamp header", ErrMissing)
	errSlackBadTime     = fmt.Errorf("%w: x-slack-request-timestamp is not unix seconds", ErrMalformed)
	errSlackNoV0        = fmt.Errorf("%w: x-slack-signature is not v0=<64 hex digits>", ErrMismatch)
	errSlackMismatch    = fmt.Errorf("%w: x-slack-signature does not match a configured secret", ErrMismatch)
)

// Slack verifies Slack's signed requests: X-Slack-Signature is
// "v0=" + hex(HMAC-SHA256(signing secret, "v0:" + X-Slack-Request-Timestamp
// + ":" + body)), keyed with the secret's raw bytes.
//
// Both headers are required (ErrMissing); a timestamp that is not canonical
// Unix seconds is ErrMalformed; a signature of another version or not 64 hex
// digits is ErrMismatch.
type Slack struct {
	keys      []*macKey
	tolerance time.Duration
}

// NewSlack returns a Slack verifier accepting any of secrets (signing
// secrets), with timestamps at most tolerance (> 0) away from now.
func NewSlack(secrets []string, tolerance time.Duration) (*Slack, error) {
	if err := checkTolerance(tolerance); err != nil {
		return nil, err
	}
	keys, err := newKeys(secrets, sha256.New)
	if err != nil {
		return nil, err
	}
	return &Slack{keys: keys, tolerance: tolerance}, nil
}

// Verify implements Verifier.
func (s *Slack) Verify(h Header, body []byte, now time.Time) error {
	sig, err := parseSlackSignature(h(HeaderSlackSignature))
	if err != nil {
		return err
	}
	ts, err := parseSlackTimestamp(h(HeaderSlackTimestamp))
	if err != nil {
		return err
	}
	if !s.match(ts, &sig, body) {
		return errSlackMismatch
	}
	return checkTimestamp(now, ts, s.tolerance)
}

func (s *Slack) match(ts int64, sig *[sha256.Size]byte, body []byte) bool {
	for _, k := range s.keys {
		m := k.get()
		b := append(m.buf[:0], "v0:"...)
		b = appendInt(b, ts)
		b = append(b, ':')
		m.h.Write(b)
		m.h.Write(body)
		ok := hmac.Equal(m.sumOf(), sig[:])
		k.put(m)
		if ok {
			return true
		}
	}
	return false
}

// parseSlackSignature parses an X-Slack-Signature value.
func parseSlackSignature(v string) ([sha256.Size]byte, error) {
	var sig [sha256.Size]byte
	if v == "" {
		return sig, errSlackMissingSig
	}
	hexSig, ok := strings.CutPrefix(v, "v0=")
	if !ok || !decodeHex(sig[:], hexSig) {
		return sig, errSlackNoV0
	}
	return sig, nil
}

// parseSlackTimestamp parses an X-Slack-Request-Timestamp value.
func parseSlackTimestamp(v string) (int64, error) {
	if v == "" {
		return 0, errSlackMissingTime
	}
	ts, ok := parseUnix(v)
	if !ok {
		return 0, errSlackBadTime
	}
	return ts, nil
}

// SignSlack returns the X-Slack-Signature value for body sent at ts, signed
// with secret, as Slack computes it (for tests and local senders).
func SignSlack(secret string, ts int64, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(appendInt([]byte("v0:"), ts))
	m.Write([]byte{':'})
	m.Write(body)
	return fmt.Sprintf("v0=%x", m.Sum(nil))
}

func init() {
	Register(Scheme{
		Name: "slack",
		// Slack's retries (X-Slack-Retry-Num) carry the same event_id.
		ID:          Location{Field: "event_id"},
		Type:        Location{Field: "event.type", Fallback: "type"},
		KeepHeaders: []string{HeaderSlackTimestamp, "X-Slack-Retry-Num", "X-Slack-Retry-Reason"},
		New:         func(p Params) (Verifier, error) { return NewSlack(p.Secrets, p.Tolerance) },
		Handshake:   slackHandshake,
	})
}

// slackHandshake answers the Events API's url_verification request with
// its challenge.
func slackHandshake(_ Header, body []byte) (Answer, bool) {
	if !bytes.Contains(body, []byte(`"url_verification"`)) { // events skip the parse
		return Answer{}, false
	}
	if t, ok := topString(body, "type"); !ok || t != "url_verification" {
		return Answer{}, false
	}
	return challengeAnswer(topString(body, "challenge")), true
}
