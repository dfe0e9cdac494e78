package signature

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Discord's interaction signing headers.
const (
	HeaderDiscordSignature = "X-Signature-Ed25519"
	HeaderDiscordTimestamp = "X-Signature-Timestamp"
)

var (
	errDiscordMissingSig  = fmt.Errorf("%w: no x-signature-ed25519 header", ErrMissing)
	errDiscordMissingTime = fmt.Errorf("%w: no x-signature-timestamp header", ErrMissing)
	errDiscordBadTime     = fmt.Errorf("%w: x-signature-timestamp is not unix seconds", ErrMalformed)
	errDiscordBadSig      = fmt.Errorf("%w: x-signature-ed25519 is not 128 hex digits", ErrMismatch)
	errDiscordMismatch    = fmt.Errorf("%w: x-signature-ed25519 does not match a configured public key", ErrMismatch)
)

// Discord verifies Discord's signed interaction requests:
// X-Signature-Ed25519 is the hex ed25519 signature of
// X-Signature-Timestamp + body, made with the application's private key;
// the secrets are its public keys in hex.
//
// Both headers are required (ErrMissing); a timestamp that is not canonical
// Unix seconds is ErrMalformed; a signature that is not 128 hex digits is
// ErrMismatch.
type Discord struct {
	keys      []ed25519.PublicKey
	tolerance time.Duration
}

// NewDiscord returns a Discord verifier accepting a signature by any of
// publicKeys (64 hex digits each), with timestamps at most tolerance (> 0)
// away from now.
func NewDiscord(publicKeys []string, tolerance time.Duration) (*Discord, error) {
	if err := checkTolerance(tolerance); err != nil {
		return nil, err
	}
	if len(publicKeys) == 0 {
		return nil, errors.New("signature: no secrets configured")
	}
	keys := make([]ed25519.PublicKey, len(publicKeys))
	for i, s := range publicKeys {
		k, err := DecodeDiscordPublicKey(s)
		if err != nil {
			return nil, fmt.Errorf("signature: secrets[%d]: %w", i, err)
		}
		keys[i] = k
	}
	return &Discord{keys: keys, tolerance: tolerance}, nil
}

// DecodeDiscordPublicKey decodes an application's public key as the
// developer portal shows it: 64 hex digits. Errors never contain the key.
func DecodeDiscordPublicKey(s string) (ed25519.PublicKey, error) {
	if s == "" {
		return nil, errors.New("empty secret")
	}
	k := make([]byte, ed25519.PublicKeySize)
	if !decodeHex(k, s) {
		return nil, errors.New("public key is not 64 hex digits")
	}
	return ed25519.PublicKey(k), nil
}

// Verify implements Verifier.
func (d *Discord) Verify(h Header, body []byte, now time.Time) error {
	sig, err := parseDiscordSignature(h(HeaderDiscordSignature))
	if err != nil {
		return err
	}
	rawTS := h(HeaderDiscordTimestamp)
	if rawTS == "" {
		return errDiscordMissingTime
	}
	ts, ok := parseUnix(rawTS)
	if !ok {
		return errDiscordBadTime
	}
	msg := make([]byte, 0, len(rawTS)+len(body))
	msg = append(append(msg, rawTS...), body...)
	if !d.match(msg, sig[:]) {
		return errDiscordMismatch
	}
	return checkTimestamp(now, ts, d.tolerance)
}

func (d *Discord) match(msg, sig []byte) bool {
	for _, k := range d.keys {
		if ed25519.Verify(k, msg, sig) {
			return true
		}
	}
	return false
}

// parseDiscordSignature parses an X-Signature-Ed25519 value.
func parseDiscordSignature(v string) ([ed25519.SignatureSize]byte, error) {
	var sig [ed25519.SignatureSize]byte
	if v == "" {
		return sig, errDiscordMissingSig
	}
	if !decodeHex(sig[:], v) {
		return sig, errDiscordBadSig
	}
	return sig, nil
}

// SignDiscord returns the X-Signature-Ed25519 value for body sent at
// timestamp ts (the header value), signed with key (for tests).
func SignDiscord(key ed25519.PrivateKey, ts string, body []byte) string {
	return hex.EncodeToString(ed25519.Sign(key, append([]byte(ts), body...)))
}

// discordPong is the answer to a PING interaction (type 1): a PONG.
var discordPong = []byte(`{"type":1}`)

func init() {
	Register(Scheme{
		Name: "discord",
		ID:   Location{Field: "id"}, Type: Location{Field: "type"},
		CheckSecret: func(s string) error {
			if _, err := DecodeDiscordPublicKey(s); err != nil {
				return fmt.Errorf("invalid discord public key: %w", err)
			}
			return nil
		},
		KeepHeaders: []string{HeaderDiscordTimestamp},
		New:         func(p Params) (Verifier, error) { return NewDiscord(p.Secrets, p.Tolerance) },
		Handshake:   discordHandshake,
	})
}

// discordHandshake answers a PING ({"type":1}) with a PONG.
func discordHandshake(_ Header, body []byte) (Answer, bool) {
	if raw, ok := topField(body, "type"); !ok || string(raw) != "1" {
		return Answer{}, false
	}
	return Answer{ContentType: "application/json", Body: discordPong}, true
}
