package signature

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stripe/stripe-go/v83/webhook"
)

func formatStripe(ts int64, sigs [][sha256.Size]byte) string {
	var b strings.Builder
	b.WriteString("t=" + strconv.FormatInt(ts, 10))
	for _, s := range sigs {
		b.WriteString(",v1=" + hex.EncodeToString(s[:]))
	}
	return b.String()
}

// FuzzStripeHeader: parsing never panics, what parses re-formats and parses
// back identically, Verify agrees with the parser, and whatever Stripe's own
// library accepts we accept (except timestamps in a non-canonical form,
// which Stripe never sends and we reject as malformed).
func FuzzStripeHeader(f *testing.F) {
	body := []byte(`{"id":"evt_1"}`)
	p := stripeSign(stripeSecretA, 1700000000, body)
	sig := hex.EncodeToString(p.Signature)
	for _, s := range []string{
		p.Header, "", "t=", "t=1", "v1=" + sig, p.Header + ",v1=" + sig + ",v0=" + sig,
		"t=1700000000, v1=" + sig, "t=+1700000000,v1=" + sig, "t=01700000000,v1=" + sig,
		"t=1700000000,t=1700000000,v1=" + sig, "t=1700000000,v1=" + strings.ToUpper(sig),
		"t=9223372036854775807,v1=00", ",,,", "t=1,v1=a=b", "=", "t=1700000000,v1=" + sig + ",",
	} {
		f.Add(s, body)
	}
	v, err := NewStripe([]string{stripeSecretA}, time.Minute)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		ts, sigs, perr := parseStripe(header, nil)
		if perr != nil {
			if !errors.Is(perr, ErrMissing) && !errors.Is(perr, ErrMalformed) || !isSentinel(perr) {
				t.Fatalf("parse error %v is not ErrMissing/ErrMalformed", perr)
			}
		} else {
			if ts < 0 {
				t.Fatalf("negative timestamp %d", ts)
			}
			again := formatStripe(ts, sigs)
			ts2, sigs2, err := parseStripe(again, nil)
			if err != nil || ts2 != ts || len(sigs2) != len(sigs) {
				t.Fatalf("%q re-formatted as %q parses to %d, %d sigs, %v", header, again, ts2, len(sigs2), err)
			}
			for i := range sigs {
				if sigs[i] != sigs2[i] {
					t.Fatalf("signature %d changed in round trip", i)
				}
			}
		}

		var now time.Time
		if perr == nil {
			now = unix(ts)
		}
		verr := v.Verify(hdr("Stripe-Signature", header), body, now)
		switch {
		case perr != nil && verr != perr: //nolint:errorlint // Verify returns parse's error value itself, not one wrapping it
			t.Fatalf("Verify = %v, parse = %v", verr, perr)
		case verr != nil && !isSentinel(verr):
			t.Fatalf("Verify error %v wraps no single sentinel", verr)
		case perr == nil && len(sigs) == 0 && !errors.Is(verr, ErrMismatch):
			t.Fatalf("no v1: Verify = %v, want ErrMismatch", verr)
		}

		if webhook.ValidatePayloadIgnoringTolerance(body, header, stripeSecretA) == nil {
			if verr != nil && !errors.Is(perr, errStripeBadTime) && !errors.Is(perr, errStripeDupTime) {
				t.Fatalf("stripe accepts %q, we return %v", header, verr)
			}
		}
	})
}

// FuzzStripeSign: every payload Stripe's code signs, we verify.
func FuzzStripeSign(f *testing.F) {
	f.Add(stripeSecretA, int64(1700000000), []byte(`{"id":"evt_1"}`))
	f.Add("x", int64(0), []byte(nil))
	f.Add("whsec_\x00\xff", int64(253402300799), []byte("t=1,v1=00"))
	f.Fuzz(func(t *testing.T, secret string, ts int64, body []byte) {
		if secret == "" {
			return
		}
		ts &= 1<<40 - 1 // non-negative, well inside time.Time's range
		p := stripeSign(secret, ts, body)
		v, err := NewStripe([]string{stripeSecretB, secret}, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Verify(hdr("Stripe-Signature", p.Header), body, unix(ts)); err != nil {
			t.Fatalf("Verify(stripe-signed %q) = %v", p.Header, err)
		}
	})
}

func formatStandard(sigs [][sha256.Size]byte) string {
	parts := make([]string, len(sigs))
	for i, s := range sigs {
		parts[i] = "v1," + base64.StdEncoding.EncodeToString(s[:])
	}
	return strings.Join(parts, " ")
}

// FuzzStandardSignatures: parsing a webhook-signature list never panics and
// what parses re-formats and parses back identically.
func FuzzStandardSignatures(f *testing.F) {
	for _, s := range []string{
		vecSig, "", " ", "v1", "v1,", ",", vecSig + " v1a,abc " + vecSig, "v1," + strings.TrimPrefix(vecSig, "v1,")[:43],
		"v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OF=", "\tv1,AAAA\t", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ\n1OE=",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		sigs, err := parseStandardSignatures(header, nil)
		if err != nil {
			if !errors.Is(err, ErrMissing) && !errors.Is(err, ErrMalformed) || !isSentinel(err) {
				t.Fatalf("parse error %v is not ErrMissing/ErrMalformed", err)
			}
			return
		}
		if len(sigs) == 0 {
			return
		}
		again := formatStandard(sigs)
		sigs2, err := parseStandardSignatures(again, nil)
		if err != nil || len(sigs2) != len(sigs) {
			t.Fatalf("%q re-formatted as %q parses to %d sigs, %v", header, again, len(sigs2), err)
		}
		for i := range sigs {
			if sigs[i] != sigs2[i] {
				t.Fatalf("signature %d changed in round trip", i)
			}
			// Each accepted v1 value is the canonical encoding, present verbatim.
			if !strings.Contains(header, "v1,"+base64.StdEncoding.EncodeToString(sigs[i][:])) {
				t.Fatalf("accepted a non-canonical v1 in %q", header)
			}
		}
	})
}

// FuzzStandardTimestamp: only canonical non-negative decimals parse, to the
// value strconv gives.
func FuzzStandardTimestamp(f *testing.F) {
	for _, s := range []string{"1614265330", "0", "", "-1", "+1", "01", "9223372036854775807", "9223372036854775808", "1e9", " 1", "1.5", "１"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ts, err := parseStandardTimestamp(s)
		want, serr := strconv.ParseInt(s, 10, 64)
		canonical := serr == nil && want >= 0 && strconv.FormatInt(want, 10) == s
		if canonical != (err == nil) {
			t.Fatalf("parseStandardTimestamp(%q) = %d, %v; strconv %d, %v", s, ts, err, want, serr)
		}
		if err == nil && ts != want {
			t.Fatalf("parseStandardTimestamp(%q) = %d, want %d", s, ts, want)
		}
		if err != nil && !isSentinel(err) {
			t.Fatalf("error %v wraps no single sentinel", err)
		}
	})
}

// FuzzStandardSign: SignStandard equals the reference library's Sign, each
// side verifies the other's signature, and tampering is detected.
func FuzzStandardSign(f *testing.F) {
	f.Add([]byte("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), vecID, int64(vecTS), []byte(vecBody))
	f.Add([]byte{}, "x", int64(0), []byte(nil))
	f.Add(bytes.Repeat([]byte{0}, 64), "a.b c", int64(1<<40), []byte("\x00."))
	f.Fuzz(func(t *testing.T, key []byte, id string, ts int64, body []byte) {
		if len(key) < minStandardKey {
			key = append(key, make([]byte, minStandardKey-len(key))...)
		}
		if id == "" || strings.ContainsAny(id, "\r\n") {
			return // a header value cannot be empty or span lines
		}
		ts &= 1<<40 - 1
		stamp := unix(ts)
		secret := "whsec_" + base64.StdEncoding.EncodeToString(key)

		ref, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		theirs, err := ref.Sign(id, stamp, body)
		if err != nil {
			t.Fatal(err)
		}
		ours := SignStandard(key, id, stamp, body)
		if ours != theirs {
			t.Fatalf("SignStandard = %q, reference %q", ours, theirs)
		}

		hh := http.Header{}
		hh[http.CanonicalHeaderKey(standardwebhooks.HeaderWebhookID)] = []string{id}
		hh[http.CanonicalHeaderKey(standardwebhooks.HeaderWebhookTimestamp)] = []string{strconv.FormatInt(ts, 10)}
		hh[http.CanonicalHeaderKey(standardwebhooks.HeaderWebhookSignature)] = []string{ours}
		if err := ref.VerifyIgnoringTimestamp(body, hh); err != nil {
			t.Fatalf("reference rejects our signature: %v", err)
		}
		v, err := NewStandard([]string{stdSecretB, secret}, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Verify(hh.Get, body, stamp); err != nil {
			t.Fatalf("Verify = %v", err)
		}
		if err := v.Verify(hh.Get, append(bytes.Clone(body), 0), stamp); !errors.Is(err, ErrMismatch) {
			t.Fatalf("Verify(tampered body) = %v", err)
		}
	})
}

// FuzzHMACSignature: prefix stripping and decoding never panic, what
// decodes re-encodes to the input (hex case aside), the GitHub and HMAC
// verifiers agree with the decoder, and a correct signature verifies.
func FuzzHMACSignature(f *testing.F) {
	f.Add(ghSig, "sha256=", []byte(ghBody), false, false)
	f.Add("", "", []byte(nil), false, false)
	f.Add(strings.ToUpper(ghSig), "SHA256=", []byte(ghBody), false, false)
	f.Add("v0:"+base64.StdEncoding.EncodeToString(make([]byte, 64)), "v0:", []byte("x"), true, true)
	f.Add(base64.StdEncoding.EncodeToString(make([]byte, 32)), "", []byte("x"), true, false)
	f.Add("sha256=zz", "sha256=", []byte{}, false, false)
	f.Fuzz(func(t *testing.T, val, prefix string, body []byte, b64, use512 bool) {
		size := sha256.Size
		if use512 {
			size = sha512.Size
		}
		dst := make([]byte, size)
		if decodeSignature(dst, val, prefix, b64) {
			again := encodeSignature(dst, prefix, b64)
			if again != val && !(!b64 && strings.HasPrefix(val, prefix) && strings.EqualFold(again[len(prefix):], val[len(prefix):])) {
				t.Fatalf("decoded %q re-encodes as %q", val, again)
			}
		}

		gh, err := NewGitHub([]string{ghSecret})
		if err != nil {
			t.Fatal(err)
		}
		err = gh.Verify(hdr("X-Hub-Signature-256", val), body, time.Time{})
		if err != nil && !isSentinel(err) {
			t.Fatalf("GitHub error %v wraps no single sentinel", err)
		}
		ghOK := decodeSignature(make([]byte, sha256.Size), val, "sha256=", false)
		if val != "" && ghOK == errors.Is(err, ErrMalformed) {
			t.Fatalf("GitHub Verify(%q) = %v, but decodable = %v", val, err, ghOK)
		}

		o := HMACOptions{Header: "X-Sig", Prefix: prefix, Encoding: "hex", Algorithm: "sha256"}
		if b64 {
			o.Encoding = "base64"
		}
		if use512 {
			o.Algorithm = "sha512"
		}
		v, err := NewHMAC([]string{"k1", ghSecret}, o)
		if err != nil {
			t.Fatal(err)
		}
		h := func(string) string { return val }
		if err := v.Verify(h, body, time.Time{}); err != nil && !isSentinel(err) {
			t.Fatalf("HMAC error %v wraps no single sentinel", err)
		}
		newHash := sha256.New
		if use512 {
			newHash = sha512.New
		}
		good := encodeSignature(hmacSum(newHash, ghSecret, body), prefix, b64)
		if err := v.Verify(func(string) string { return good }, body, time.Time{}); err != nil {
			t.Fatalf("Verify(correct %q) = %v", good, err)
		}
	})
}
