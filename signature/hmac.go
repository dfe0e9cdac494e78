package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"errors"
	"fmt"
	"hash"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// HeaderGitHubSignature is the header carrying GitHub's SHA-256 signature.
const HeaderGitHubSignature = "X-Hub-Signature-256"

// HMACOptions configures the generic HMAC scheme:
// header value = Prefix + Encoding(HMAC-Algorithm(secret, body)).
type HMACOptions struct {
	// Header carrying the signature. Required.
	Header string
	// Prefix before the encoded signature, e.g. "sha256=". Optional; when
	// set, a value without it is ErrMalformed. Matched case-sensitively.
	Prefix string
	// Algorithm names the hash, case-insensitive: "sha256" (default) or
	// "sha512".
	Algorithm string
	// Encoding names the signature's encoding, case-insensitive: "hex"
	// (default; digits of either case accepted) or "base64" (standard
	// alphabet, padded, canonical; URL-safe and unpadded forms are not
	// accepted).
	Encoding string
}

// HMAC verifies a signature header carrying an HMAC of the raw body keyed
// with a secret's raw bytes. It does not check any timestamp: it cannot
// detect replays.
type HMAC struct {
	keys     []*macKey
	header   string
	prefix   string
	size     int  // digest size in bytes
	base64   bool // else hex
	missing  error
	badValue error
	mismatch error
}

// NewHMAC returns a generic HMAC verifier accepting any of secrets.
func NewHMAC(secrets []string, o HMACOptions) (*HMAC, error) {
	if o.Header == "" {
		return nil, errors.New("signature: hmac: header is required")
	}
	if !httpguts.ValidHeaderFieldName(o.Header) {
		return nil, fmt.Errorf("signature: hmac: header %q is not a valid header name", o.Header)
	}
	var newHash func() hash.Hash
	var size int
	switch strings.ToLower(o.Algorithm) {
	case "", "sha256":
		newHash, size = sha256.New, sha256.Size
	case "sha512":
		newHash, size = sha512.New, sha512.Size
	default:
		return nil, fmt.Errorf("signature: hmac: unknown algorithm %q (want sha256 or sha512)", o.Algorithm)
	}
	var b64 bool
	switch strings.ToLower(o.Encoding) {
	case "", "hex":
	case "base64":
		b64 = true
	default:
		return nil, fmt.Errorf("signature: hmac: unknown encoding %q (want hex or base64)", o.Encoding)
	}
	keys, err := newKeys(secrets, newHash)
	if err != nil {
		return nil, err
	}
	name := strings.ToLower(o.Header)
	enc := "hex"
	if b64 {
		enc = "base64"
	}
	if o.Prefix != "" {
		enc = "prefixed " + enc
	}
	v := &HMAC{
		keys:     keys,
		header:   o.Header,
		prefix:   o.Prefix,
		size:     size,
		base64:   b64,
		missing:  fmt.Errorf("%w: no %s header", ErrMissing, name),
		badValue: fmt.Errorf("%w: %s is not the %s of a %d-byte digest", ErrMalformed, name, enc, size),
		mismatch: fmt.Errorf("%w: %s does not match a configured secret", ErrMismatch, name),
	}
	return v, nil
}

// Verify implements Verifier. now is unused.
func (v *HMAC) Verify(h Header, body []byte, _ time.Time) error {
	val := h(v.header)
	if val == "" {
		return v.missing
	}
	var buf [maxDigest]byte
	sig := buf[:v.size]
	if !decodeSignature(sig, val, v.prefix, v.base64) {
		return v.badValue
	}
	for _, k := range v.keys {
		m := k.get()
		m.h.Write(body)
		ok := hmac.Equal(m.sumOf(), sig)
		k.put(m)
		if ok {
			return nil
		}
	}
	return v.mismatch
}

// decodeSignature strips prefix from val and decodes the rest, which must
// encode exactly len(dst) bytes, into dst.
func decodeSignature(dst []byte, val, prefix string, base64 bool) bool {
	rest, ok := strings.CutPrefix(val, prefix)
	if !ok {
		return false
	}
	if base64 {
		return decodeBase64(dst, rest)
	}
	return decodeHex(dst, rest)
}

// GitHub verifies GitHub's "X-Hub-Signature-256: sha256=<hex>" header,
// hex(HMAC-SHA256(secret, body)). The legacy SHA-1 X-Hub-Signature header
// is not accepted. Like HMAC, it cannot detect replays; X-GitHub-Delivery
// is the caller's deduplication key.
type GitHub struct {
	h *HMAC
}

// NewGitHub returns a GitHub verifier accepting any of secrets.
func NewGitHub(secrets []string) (*GitHub, error) {
	h, err := NewHMAC(secrets, HMACOptions{Header: HeaderGitHubSignature, Prefix: "sha256="})
	if err != nil {
		return nil, err
	}
	return &GitHub{h: h}, nil
}

// Verify implements Verifier. now is unused.
func (g *GitHub) Verify(h Header, body []byte, now time.Time) error {
	return g.h.Verify(h, body, now)
}

func init() {
	Register(Scheme{
		Name: "hmac",
		New:  func(p Params) (Verifier, error) { return NewHMAC(p.Secrets, p.HMAC) },
	})
	Register(Scheme{
		Name: "github",
		ID:   Location{Header: "X-GitHub-Delivery"}, Type: Location{Header: "X-GitHub-Event"},
		New: func(p Params) (Verifier, error) { return NewGitHub(p.Secrets) },
	})
}
