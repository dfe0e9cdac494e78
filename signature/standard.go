package signature

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Standard Webhooks header names.
const (
	HeaderWebhookID        = "Webhook-Id"
	HeaderWebhookTimestamp = "Webhook-Timestamp"
	HeaderWebhookSignature = "Webhook-Signature"
)

// stdDialect is a sender of Standard Webhooks signatures under its own
// header names (Svix's svix-*), with the errors naming them.
type stdDialect struct {
	id, timestamp, signature string // header names
	// Errors naming them.
	missingSig, missingID, missingTime, badTime error
	noEntry, noSig, mismatch                    error
}

// newStdDialect returns the dialect whose headers are prefix + "-Id",
// "-Timestamp" and "-Signature" (prefix in canonical case).
func newStdDialect(prefix string) *stdDialect {
	p := strings.ToLower(prefix)
	sig := p + "-signature"
	return &stdDialect{
		id: prefix + "-Id", timestamp: prefix + "-Timestamp", signature: prefix + "-Signature",
		missingSig:  fmt.Errorf("%w: no %s header", ErrMissing, sig),
		missingID:   fmt.Errorf("%w: no %s-id header", ErrMissing, p),
		missingTime: fmt.Errorf("%w: no %s-timestamp header", ErrMissing, p),
		badTime:     fmt.Errorf("%w: %s-timestamp is not unix seconds", ErrMalformed, p),
		noEntry:     fmt.Errorf("%w: %s has no <version>,<signature> entry", ErrMalformed, sig),
		noSig:       fmt.Errorf("%w: %s has no valid signature of a configured kind (v1, v1a)", ErrMismatch, sig),
		mismatch:    fmt.Errorf("%w: no %s signature matches a configured secret or key", ErrMismatch, sig),
	}
}

var standardDialect = newStdDialect("Webhook")

// Errors of the webhook-signature parser.
var (
	errStdMissingSig = standardDialect.missingSig
	errStdNoEntry    = standardDialect.noEntry
)

// Standard verifies Standard Webhooks 1.0 signatures: headers webhook-id,
// webhook-timestamp and webhook-signature, the latter a space-separated
// list of "<version>,<base64>" entries, each over
// id + "." + timestamp + "." + body. A v1 entry is the HMAC-SHA256 keyed
// with a decoded "whsec_<base64>" secret; a v1a entry (asymmetric) is the
// ed25519 signature verified with a "whpk_<base64>" public key. Secrets
// may mix both kinds; any match authenticates.
//
// All three headers are required (ErrMissing). Entries of other versions,
// and of a kind no secret is configured for, are ignored, as are values
// that are not the canonical padded standard base64 of a digest (32 bytes)
// or signature (64 bytes) and words without a ","; a header with no
// "<version>,<signature>" entry at all is ErrMalformed, one with no valid
// entry of a configured kind is ErrMismatch. Only the first four valid v1a
// entries are checked (each costs an ed25519 verification).
type Standard struct {
	keys      []*macKey
	pubs      []ed25519.PublicKey
	tolerance time.Duration
	names     *stdDialect
}

// NewStandard returns a Standard Webhooks verifier accepting any of
// secrets ("whsec_<base64>", see DecodeStandardSecret, or a "whpk_<base64>"
// public key, see DecodeStandardPublicKey), with timestamps at most
// tolerance (> 0) away from now.
func NewStandard(secrets []string, tolerance time.Duration) (*Standard, error) {
	return newStandard(secrets, tolerance, standardDialect)
}

func newStandard(secrets []string, tolerance time.Duration, names *stdDialect) (*Standard, error) {
	if err := checkTolerance(tolerance); err != nil {
		return nil, err
	}
	if len(secrets) == 0 {
		return nil, fmt.Errorf("signature: no secrets configured")
	}
	s := &Standard{tolerance: tolerance, names: names}
	for i, sec := range secrets {
		if strings.HasPrefix(sec, publicKeyPrefix) {
			pub, err := DecodeStandardPublicKey(sec)
			if err != nil {
				return nil, fmt.Errorf("signature: secrets[%d]: %w", i, err)
			}
			s.pubs = append(s.pubs, pub)
			continue
		}
		key, err := DecodeStandardSecret(sec)
		if err != nil {
			return nil, fmt.Errorf("signature: secrets[%d]: %w", i, err)
		}
		s.keys = append(s.keys, newMacKey(sha256.New, key))
	}
	return s, nil
}

// Verify implements Verifier.
func (s *Standard) Verify(h Header, body []byte, now time.Time) error {
	n := s.names
	sigHdr := h(n.signature)
	if sigHdr == "" {
		return n.missingSig
	}
	id := h(n.id)
	if id == "" {
		return n.missingID
	}
	ts, err := n.parseTimestamp(h(n.timestamp))
	if err != nil {
		return err
	}
	var buf [4][sha256.Size]byte
	sigs, err := parseStandardSignatures(sigHdr, buf[:0])
	if err != nil {
		return n.noEntry // the header is present: no other error is possible
	}
	if len(s.keys) == 0 {
		sigs = sigs[:0]
	}
	var abuf [2][ed25519.SignatureSize]byte
	var asigs [][ed25519.SignatureSize]byte
	if len(s.pubs) > 0 {
		asigs = parseStandardV1a(sigHdr, abuf[:0])
	}
	if len(sigs) == 0 && len(asigs) == 0 {
		return n.noSig
	}
	if !s.match(id, ts, sigs, body) && !s.matchV1a(id, ts, asigs, body) {
		return n.mismatch
	}
	return checkTimestamp(now, ts, s.tolerance)
}

func (s *Standard) match(id string, ts int64, sigs [][sha256.Size]byte, body []byte) bool {
	if len(sigs) == 0 {
		return false
	}
	for _, k := range s.keys {
		m := k.get()
		m.writeString(id)
		m.buf[0] = '.'
		m.h.Write(m.buf[:1])
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

// signedPool holds the buffers v1a's signed content is assembled in
// (ed25519 signs the whole message, not a running hash).
var signedPool = sync.Pool{New: func() any { return new([]byte) }}

func (s *Standard) matchV1a(id string, ts int64, sigs [][ed25519.SignatureSize]byte, body []byte) bool {
	if len(sigs) == 0 {
		return false
	}
	bp := signedPool.Get().(*[]byte)
	msg := append((*bp)[:0], id...)
	msg = append(msg, '.')
	msg = appendInt(msg, ts)
	msg = append(msg, '.')
	msg = append(msg, body...)
	ok := false
	for _, pub := range s.pubs {
		for i := range sigs {
			if ed25519.Verify(pub, msg, sigs[i][:]) {
				ok = true
				break
			}
		}
		if ok {
			break
		}
	}
	if cap(msg) <= 64<<10 { // keep the pool's buffers small
		*bp = msg
		signedPool.Put(bp)
	}
	return ok
}

// parseStandardTimestamp parses a webhook-timestamp value.
func parseStandardTimestamp(v string) (int64, error) { return standardDialect.parseTimestamp(v) }

// parseTimestamp parses a <prefix>-timestamp value.
func (n *stdDialect) parseTimestamp(v string) (int64, error) {
	if v == "" {
		return 0, n.missingTime
	}
	ts, ok := parseUnix(v)
	if !ok {
		return 0, n.badTime
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
	for rest := trimLeftOWS(v); rest != ""; rest = trimLeftOWS(rest) {
		var version, sig string
		var ok bool
		version, sig, ok, rest = nextStdEntry(rest)
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

// maxStandardV1a bounds the v1a signatures checked per request: each costs
// an ed25519 verification over the whole body. A sender signs with one key,
// two while it rotates.
const maxStandardV1a = 4

// parseStandardV1a appends the decoded valid v1a (ed25519) signatures of a
// webhook-signature value to sigs, the first maxStandardV1a only.
func parseStandardV1a(v string, sigs [][ed25519.SignatureSize]byte) [][ed25519.SignatureSize]byte {
	n := len(sigs)
	for rest := trimLeftOWS(v); rest != "" && len(sigs)-n < maxStandardV1a; rest = trimLeftOWS(rest) {
		var version, sig string
		var ok bool
		version, sig, ok, rest = nextStdEntry(rest)
		if !ok || version != "v1a" {
			continue
		}
		var d [ed25519.SignatureSize]byte
		if decodeBase64(d[:], sig) {
			sigs = append(sigs, d)
		}
	}
	return sigs
}

// nextStdEntry splits the first word off v, a webhook-signature value
// without leading whitespace (words are separated by runs of spaces or
// tabs), and cuts it at its first ",": ok is false for a word without one.
func nextStdEntry(v string) (version, sig string, ok bool, rest string) {
	i := 0
	for i < len(v) && !isOWS(v[i]) {
		i++
	}
	version, sig, ok = strings.Cut(v[:i], ",")
	return version, sig, ok, v[i:]
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
			if err := CheckStandardSecret(s); err != nil {
				return fmt.Errorf("invalid standard webhooks secret: %w", err)
			}
			return nil
		},
		KeepHeaders: []string{"webhook-timestamp"},
		New:         func(p Params) (Verifier, error) { return NewStandard(p.Secrets, p.Tolerance) },
	})
}
