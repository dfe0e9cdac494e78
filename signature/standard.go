package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
	"time"
)

// Standard Webhooks header names.
const (
	HeaderWebhookID        = "Webhook-Id"
	HeaderWebhookTimestamp = "Webhook-Timestamp"
	HeaderWebhookSignature = "Webhook-Signature"
)

var (
	errStdMissingSig  = fmt.Errorf("%w: no webhook-signature header", ErrMissing)
	errStdMissingID   = fmt.Errorf("%w: no webhook-id header", ErrMissing)
	errStdMissingTime = fmt.Errorf("%w: no webhook-timestamp header", ErrMissing)
	errStdBadTime     = fmt.Errorf("%w: webhook-timestamp is not unix seconds", ErrMalformed)
	errStdNoEntry     = fmt.Errorf("%w: webhook-signature has no <version>,<signature> entry", ErrMalformed)
	errStdNoV1        = fmt.Errorf("%w: webhook-signature has no valid v1 signature", ErrMismatch)
	errStdMismatch    = fmt.Errorf("%w: no webhook-signature v1 signature matches a configured secret", ErrMismatch)
)

// Standard verifies Standard Webhooks 1.0 signatures: headers webhook-id,
// webhook-timestamp and webhook-signature, the latter a space-separated
// list of "<version>,<base64>" entries. A v1 entry is
// base64(HMAC-SHA256(key, id + "." + timestamp + "." + body)) where key is
// the decoded "whsec_<base64>" secret.
//
// All three headers are required (ErrMissing). Entries of other versions
// (v1a, ...) are ignored, as are v1 values that are not the canonical
// padded standard base64 of 32 bytes and words without a ","; a header with
// no "<version>,<signature>" entry at all is ErrMalformed, one with no valid
// v1 entry is ErrMismatch.
type Standard struct {
	keys      []*macKey
	tolerance time.Duration
}

// NewStandard returns a Standard Webhooks verifier accepting any of
// secrets ("whsec_<base64>", see DecodeStandardSecret), with timestamps at
// most tolerance (> 0) away from now.
func NewStandard(secrets []string, tolerance time.Duration) (*Standard, error) {
	if err := checkTolerance(tolerance); err != nil {
		return nil, err
	}
	if len(secrets) == 0 {
		return nil, fmt.Errorf("signature: no secrets configured")
	}
	keys := make([]*macKey, len(secrets))
	for i, s := range secrets {
		key, err := DecodeStandardSecret(s)
		if err != nil {
			return nil, fmt.Errorf("signature: secrets[%d]: %w", i, err)
		}
		keys[i] = newMacKey(sha256.New, key)
	}
	return &Standard{keys: keys, tolerance: tolerance}, nil
}

// Verify implements Verifier.
func (s *Standard) Verify(h Header, body []byte, now time.Time) error {
	sigHdr := h(HeaderWebhookSignature)
	if sigHdr == "" {
		return errStdMissingSig
	}
	id := h(HeaderWebhookID)
	if id == "" {
		return errStdMissingID
	}
	ts, err := parseStandardTimestamp(h(HeaderWebhookTimestamp))
	if err != nil {
		return err
	}
	var buf [4][sha256.Size]byte
	sigs, err := parseStandardSignatures(sigHdr, buf[:0])
	if err != nil {
		return err
	}
	if len(sigs) == 0 {
		return errStdNoV1
	}
	if !s.match(id, ts, sigs, body) {
		return errStdMismatch
	}
	return checkTimestamp(now, ts, s.tolerance)
}

func (s *Standard) match(id string, ts int64, sigs [][sha256.Size]byte, body []byte) bool {
	for _, k := range s.keys {
		m := k.get()
		m.writeString(id)
		m.buf[0] = '.'
		m.h.Write(m.buf[:1])
		m.writeUnixDot(ts)
		m.h.Write(body)
		sum := m.sumOf()
		ok := false
		for i := range sigs {
			if hmac.Equal(sum, sigs[i][:]) {
				ok = true
				break
			}
		}
		k.put(m)
		if ok {
			return true
		}
	}
	return false
}

// parseStandardTimestamp parses a webhook-timestamp value.
func parseStandardTimestamp(v string) (int64, error) {
	if v == "" {
		return 0, errStdMissingTime
	}
	ts, ok := parseUnix(v)
	if !ok {
		return 0, errStdBadTime
	}
	return ts, nil
}

// parseStandardSignatures parses a webhook-signature value and appends the
// decoded valid v1 signatures to sigs. Entries are separated by runs of
// spaces or tabs.
func parseStandardSignatures(v string, sigs [][sha256.Size]byte) ([][sha256.Size]byte, error) {
	if v == "" {
		return sigs, errStdMissingSig
	}
	entries := 0
	for rest := v; ; {
		rest = trimLeftOWS(rest)
		if rest == "" {
			break
		}
		i := 0
		for i < len(rest) && !isOWS(rest[i]) {
			i++
		}
		entry := rest[:i]
		rest = rest[i:]
		version, sig, ok := strings.Cut(entry, ",")
		if !ok {
			continue
		}
		entries++
		if version != "v1" {
			continue
		}
		var d [sha256.Size]byte
		if decodeBase64(d[:], sig) {
			sigs = append(sigs, d)
		}
	}
	if entries == 0 {
		return sigs, errStdNoEntry
	}
	return sigs, nil
}

func trimLeftOWS(s string) string {
	for len(s) > 0 && isOWS(s[0]) {
		s = s[1:]
	}
	return s
}

// SignStandard returns "v1,<base64 HMAC-SHA256(key, id+"."+unix(ts)+"."+body)>"
// for outbound requests: the webhook-signature value to send along with
// webhook-id id and webhook-timestamp strconv.FormatInt(ts.Unix(), 10).
// key is the decoded secret (see DecodeStandardSecret).
func SignStandard(key []byte, id string, ts time.Time, body []byte) string {
	m := hmac.New(sha256.New, key)
	var buf [64]byte
	b := append(buf[:0], id...)
	b = append(b, '.')
	b = appendInt(b, ts.Unix())
	b = append(b, '.')
	m.Write(b)
	m.Write(body)
	var sum [sha256.Size]byte
	out := make([]byte, 0, 3+base64.StdEncoding.EncodedLen(sha256.Size))
	out = append(out, "v1,"...)
	out = base64.StdEncoding.AppendEncode(out, m.Sum(sum[:0]))
	return string(out)
}

func init() {
	Register(Scheme{
		Name: "standard",
		ID:   Location{Header: "webhook-id"}, Type: Location{Field: "type"},
		CheckSecret: func(s string) error {
			if _, err := DecodeStandardSecret(s); err != nil {
				return fmt.Errorf("invalid standard webhooks secret: %w", err)
			}
			return nil
		},
		KeepHeaders: []string{"webhook-timestamp"},
		New:         func(p Params) (Verifier, error) { return NewStandard(p.Secrets, p.Tolerance) },
	})
}
