package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

func formatPaddle(ts int64, sigs [][sha256.Size]byte) string {
	var b strings.Builder
	b.WriteString("ts=" + strconv.FormatInt(ts, 10))
	for _, s := range sigs {
		b.WriteString(";h1=" + hex.EncodeToString(s[:]))
	}
	return b.String()
}

func paddleSign(secret string, ts int64, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(strconv.FormatInt(ts, 10) + ":"))
	m.Write(body)
	return "ts=" + strconv.FormatInt(ts, 10) + ";h1=" + hex.EncodeToString(m.Sum(nil))
}

// FuzzPaddleHeader: parsing never panics, errors are ErrMissing or
// ErrMalformed, at most maxPaddleH1 signatures are kept, what parses
// re-formats and parses back identically, and Verify accepts what Paddle's
// scheme signs and refuses the same header over another body.
func FuzzPaddleHeader(f *testing.F) {
	for _, s := range []string{
		paddleSignature, "", ";", "ts=", "ts=1", "h1=" + paddleH1, paddleSignature + ";h1=" + paddleH1,
		"ts=1710929255 ; h1=" + paddleH1, "ts=01710929255;h1=" + paddleH1, paddleSignature + ";",
		"ts=9223372036854775807;h1=00", "==", "ts=1;h1=a=b", "ts=1;ts=1",
	} {
		f.Add(s, []byte(paddlePayload))
	}
	v, err := NewPaddle([]string{paddleSecret}, time.Minute)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		ts, sigs, perr := parsePaddle(header, nil)
		if perr != nil {
			if !errors.Is(perr, ErrMissing) && !errors.Is(perr, ErrMalformed) || !isSentinel(perr) {
				t.Fatalf("parse error %v is not ErrMissing/ErrMalformed", perr)
			}
		} else {
			if ts < 0 || len(sigs) > maxPaddleH1 {
				t.Fatalf("ts %d, %d signatures", ts, len(sigs))
			}
			again := formatPaddle(ts, sigs)
			ts2, sigs2, err := parsePaddle(again, nil)
			if err != nil || ts2 != ts || len(sigs2) != len(sigs) {
				t.Fatalf("%q re-formatted as %q parses to %d, %d sigs, %v", header, again, ts2, len(sigs2), err)
			}
			for i := range sigs {
				if sigs[i] != sigs2[i] {
					t.Fatalf("signature %d changed in round trip", i)
				}
			}
		}
		if err := v.Verify(hdr("Paddle-Signature", header), body, unix(ts)); err != nil && !isSentinel(err) {
			t.Fatalf("Verify error %v wraps no single sentinel", err)
		}
		sec := int64(len(header)) + paddleTS
		signed := paddleSign(paddleSecret, sec, body)
		if err := v.Verify(hdr("Paddle-Signature", signed), body, unix(sec)); err != nil {
			t.Fatalf("Verify(signed %q) = %v", signed, err)
		}
		if err := v.Verify(hdr("Paddle-Signature", signed), append(body, 'x'), unix(sec)); !errors.Is(err, ErrMismatch) {
			t.Fatalf("Verify(signed, other body) = %v", err)
		}
	})
}

// FuzzShopifyVerify: any signature header and body give nil or one
// sentinel, and nil only for the body Shopify's vector signs.
func FuzzShopifyVerify(f *testing.F) {
	for _, s := range []string{shopifyHmac, "", "=", shopifyHmac[:43], "sha256=" + shopifyHmac, strings.Repeat("A", 88)} {
		f.Add(s, []byte(shopifyBody))
	}
	v, err := NewShopify([]string{shopifySecret})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, sig string, body []byte) {
		err := v.Verify(hdr("X-Shopify-Hmac-Sha256", sig), body, time.Time{})
		if err == nil {
			if sig != shopifyHmac || string(body) != shopifyBody {
				t.Fatalf("accepted %q over %q", sig, body)
			}
			return
		}
		if !isSentinel(err) {
			t.Fatalf("error %v wraps no single sentinel", err)
		}
	})
}
