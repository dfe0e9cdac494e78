package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"strings"
	"time"
)

// Twitch EventSub webhook headers.
const (
	HeaderTwitchMessageID        = "Twitch-Eventsub-Message-Id"
	HeaderTwitchMessageTimestamp = "Twitch-Eventsub-Message-Timestamp"
	HeaderTwitchMessageSignature = "Twitch-Eventsub-Message-Signature"
	HeaderTwitchMessageType      = "Twitch-Eventsub-Message-Type"
	HeaderTwitchSubscriptionType = "Twitch-Eventsub-Subscription-Type"
)

// DefaultTwitchTolerance is the age past which Twitch's documentation says
// to refuse a message (its replay protection).
const DefaultTwitchTolerance = 10 * time.Minute

// maxTwitchTimestamp bounds the timestamp header before it is parsed; an
// RFC 3339 time with nanoseconds and an offset is 35 bytes.
const maxTwitchTimestamp = 64

var (
	errTwitchMissingSig  = fmt.Errorf("%w: no twitch-eventsub-message-signature header", ErrMissing)
	errTwitchMissingID   = fmt.Errorf("%w: no twitch-eventsub-message-id header", ErrMissing)
	errTwitchMissingTime = fmt.Errorf("%w: no twitch-eventsub-message-timestamp header", ErrMissing)
	errTwitchBadTime     = fmt.Errorf("%w: twitch-eventsub-message-timestamp is not an rfc 3339 time", ErrMalformed)
	errTwitchNoSHA256    = fmt.Errorf("%w: twitch-eventsub-message-signature is not sha256=<64 hex digits>", ErrMismatch)
	errTwitchMismatch    = fmt.Errorf("%w: twitch-eventsub-message-signature does not match a configured secret", ErrMismatch)
)

// Twitch verifies Twitch EventSub webhook messages:
// Twitch-Eventsub-Message-Signature is "sha256=" + hex(HMAC-SHA256(secret,
// message id + timestamp + body)), the id and timestamp being the
// Twitch-Eventsub-Message-Id and -Timestamp header values as sent; the
// timestamp is an RFC 3339 time.
//
// The three headers are required (ErrMissing); a timestamp that is not RFC
// 3339 is ErrMalformed; a signature that is not "sha256=" and 64 hex digits
// is ErrMismatch.
type Twitch struct {
	keys      []*macKey
	tolerance time.Duration
}

// NewTwitch returns a Twitch EventSub verifier accepting any of secrets
// (the subscriptions' secrets), with timestamps at most tolerance (> 0) away
// from now.
func NewTwitch(secrets []string, tolerance time.Duration) (*Twitch, error) {
	if err := checkTolerance(tolerance); err != nil {
		return nil, err
	}
	keys, err := newKeys(secrets, sha256.New)
	if err != nil {
		return nil, err
	}
	return &Twitch{keys: keys, tolerance: tolerance}, nil
}

// Verify implements Verifier.
func (t *Twitch) Verify(h Header, body []byte, now time.Time) error {
	sig, err := parseTwitchSignature(h(HeaderTwitchMessageSignature))
	if err != nil {
		return err
	}
	id := h(HeaderTwitchMessageID)
	if id == "" {
		return errTwitchMissingID
	}
	rawTS := h(HeaderTwitchMessageTimestamp)
	ts, err := parseTwitchTimestamp(rawTS)
	if err != nil {
		return err
	}
	if !t.match(id, rawTS, &sig, body) {
		return errTwitchMismatch
	}
	return checkTime(now, ts, t.tolerance)
}

func (t *Twitch) match(id, ts string, sig *[sha256.Size]byte, body []byte) bool {
	for _, k := range t.keys {
		m := k.get()
		m.writeString(id)
		m.writeString(ts)
		m.h.Write(body)
		ok := hmac.Equal(m.sumOf(), sig[:])
		k.put(m)
		if ok {
			return true
		}
	}
	return false
}

// parseTwitchSignature parses a Twitch-Eventsub-Message-Signature value.
func parseTwitchSignature(v string) ([sha256.Size]byte, error) {
	var sig [sha256.Size]byte
	if v == "" {
		return sig, errTwitchMissingSig
	}
	hexSig, ok := strings.CutPrefix(v, "sha256=")
	if !ok || !decodeHex(sig[:], hexSig) {
		return sig, errTwitchNoSHA256
	}
	return sig, nil
}

// parseTwitchTimestamp parses a Twitch-Eventsub-Message-Timestamp value:
// RFC 3339 with an optional fraction of up to nine digits.
func parseTwitchTimestamp(v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, errTwitchMissingTime
	}
	if len(v) > maxTwitchTimestamp {
		return time.Time{}, errTwitchBadTime
	}
	ts, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, errTwitchBadTime
	}
	return ts, nil
}

// checkTime reports ErrTimestamp if ts is more than tol away from now; a
// difference of exactly tol is accepted.
func checkTime(now, ts time.Time, tol time.Duration) error {
	d := now.Sub(ts) // saturates
	switch {
	case d > tol:
		return fmt.Errorf("%w: signed %s ago, tolerance %s", ErrTimestamp, roundDur(d), tol)
	case d < -tol:
		return fmt.Errorf("%w: signed %s in the future, tolerance %s", ErrTimestamp, roundDur(-d), tol)
	}
	return nil
}

// SignTwitch returns the Twitch-Eventsub-Message-Signature value for body
// sent with message id and timestamp ts (the header values), signed with
// secret, as Twitch computes it (for tests and local senders).
func SignTwitch(secret, id, ts string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(id + ts))
	m.Write(body)
	return fmt.Sprintf("sha256=%x", m.Sum(nil))
}

// Twitch-Eventsub-Message-Type of the request that checks a new
// subscription's callback.
const twitchVerification = "webhook_callback_verification"

func init() {
	Register(Scheme{
		Name: "twitch",
		// A message Twitch sends again keeps its id; revocations are events.
		ID:        Location{Header: HeaderTwitchMessageID},
		Type:      Location{Header: HeaderTwitchSubscriptionType},
		Tolerance: DefaultTwitchTolerance,
		KeepHeaders: []string{
			HeaderTwitchMessageTimestamp, HeaderTwitchMessageType,
			"Twitch-Eventsub-Message-Retry", "Twitch-Eventsub-Subscription-Version",
		},
		New:       func(p Params) (Verifier, error) { return NewTwitch(p.Secrets, p.Tolerance) },
		Handshake: twitchHandshake,
	})
}

// twitchHandshake answers a webhook_callback_verification with its raw
// challenge as text.
func twitchHandshake(h Header, body []byte) (Answer, bool) {
	if h(HeaderTwitchMessageType) != twitchVerification {
		return Answer{}, false
	}
	return challengeAnswer(topString(body, "challenge")), true
}
