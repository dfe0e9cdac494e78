package signature

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v83/webhook"
)

const (
	stripeSecretA = "whsec_test_secret_A_0123456789abcdef"
	stripeSecretB = "whsec_test_secret_B_fedcba9876543210"
)

// stripeSign signs with Stripe's own code.
func stripeSign(secret string, ts int64, body []byte) *webhook.SignedPayload {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{
		Payload:   body,
		Secret:    secret,
		Timestamp: unix(ts),
	})
}

func TestStripe(t *testing.T) {
	t.Parallel()
	const now = 1700000000
	body := []byte(`{"id":"evt_1","object":"event","type":"charge.succeeded"}`)
	good := stripeSign(stripeSecretA, now, body)
	goodHex := hex.EncodeToString(good.Signature)
	otherHex := hex.EncodeToString(stripeSign(stripeSecretB, now, body).Signature)
	t0 := fmt.Sprintf("t=%d", now)

	tests := []struct {
		name    string
		secrets []string
		header  string // Stripe-Signature; "" means absent
		body    []byte
		now     int64
		want    error
	}{
		{"valid", []string{stripeSecretA}, good.Header, body, now, nil},
		{"valid one second later", []string{stripeSecretA}, good.Header, body, now + 1, nil},
		{"rotated secret second matches", []string{stripeSecretB, stripeSecretA}, good.Header, body, now, nil},
		{"multiple v1 second matches", []string{stripeSecretA}, t0 + ",v1=" + otherHex + ",v1=" + goodHex, body, now, nil},
		{"multiple v1 first matches", []string{stripeSecretA}, t0 + ",v1=" + goodHex + ",v1=" + otherHex, body, now, nil},
		{"v0 and unknown keys ignored", []string{stripeSecretA}, t0 + ",v0=" + otherHex + ",x=y,v1=" + goodHex, body, now, nil},
		{"t after v1", []string{stripeSecretA}, "v1=" + goodHex + "," + t0, body, now, nil},
		{"whitespace around elements", []string{stripeSecretA}, t0 + " , v1=" + goodHex, body, now, nil},
		{"uppercase hex", []string{stripeSecretA}, t0 + ",v1=" + strings.ToUpper(goodHex), body, now, nil},
		{"invalid v1 ignored when another matches", []string{stripeSecretA}, t0 + ",v1=zz,v1=" + goodHex, body, now, nil},
		{"exactly tolerance old", []string{stripeSecretA}, good.Header, body, now + 300, nil},
		{"exactly tolerance ahead", []string{stripeSecretA}, good.Header, body, now - 300, nil},

		{"wrong secret", []string{stripeSecretB}, good.Header, body, now, ErrMismatch},
		{"tampered body", []string{stripeSecretA}, good.Header, append(bytes.Clone(body), ' '), now, ErrMismatch},
		{"empty body", []string{stripeSecretA}, good.Header, nil, now, ErrMismatch},
		{"tampered timestamp", []string{stripeSecretA}, fmt.Sprintf("t=%d,v1=%s", now+1, goodHex), body, now, ErrMismatch},
		{"signature for other version only", []string{stripeSecretA}, t0 + ",v0=" + goodHex, body, now, ErrMismatch},
		{"v1 not hex", []string{stripeSecretA}, t0 + ",v1=" + strings.Repeat("z", 64), body, now, ErrMismatch},
		{"v1 truncated", []string{stripeSecretA}, t0 + ",v1=" + goodHex[:62], body, now, ErrMismatch},
		{"v1 empty", []string{stripeSecretA}, t0 + ",v1=", body, now, ErrMismatch},
		{"forged and stale is mismatch", []string{stripeSecretB}, good.Header, body, now + 3600, ErrMismatch},

		{"stale", []string{stripeSecretA}, good.Header, body, now + 301, ErrTimestamp},
		{"future", []string{stripeSecretA}, good.Header, body, now - 301, ErrTimestamp},
		{"far future", []string{stripeSecretA}, good.Header, body, 0, ErrTimestamp},
		{"beyond year 36812", []string{stripeSecretA}, stripeSign(stripeSecretA, 1<<41, body).Header, body, now, ErrTimestamp},
		{"max int64", []string{stripeSecretA}, "t=9223372036854775807,v1=" + hex.EncodeToString(hmacSum(sha256.New, stripeSecretA, []byte("9223372036854775807."+string(body)))), body, now, ErrTimestamp},
		{"epoch", []string{stripeSecretA}, "t=0,v1=" + hex.EncodeToString(hmacSum(sha256.New, stripeSecretA, []byte("0."+string(body)))), body, 100, nil},

		{"missing", []string{stripeSecretA}, "", body, now, ErrMissing},
		{"garbage", []string{stripeSecretA}, "garbage", body, now, ErrMalformed},
		{"no timestamp", []string{stripeSecretA}, "v1=" + goodHex, body, now, ErrMalformed},
		{"timestamp not a number", []string{stripeSecretA}, "t=abc,v1=" + goodHex, body, now, ErrMalformed},
		{"timestamp empty", []string{stripeSecretA}, "t=,v1=" + goodHex, body, now, ErrMalformed},
		{"timestamp signed", []string{stripeSecretA}, fmt.Sprintf("t=+%d,v1=%s", now, goodHex), body, now, ErrMalformed},
		{"timestamp negative", []string{stripeSecretA}, "t=-1,v1=" + goodHex, body, now, ErrMalformed},
		{"timestamp leading zero", []string{stripeSecretA}, fmt.Sprintf("t=0%d,v1=%s", now, goodHex), body, now, ErrMalformed},
		{"timestamp overflow", []string{stripeSecretA}, "t=99999999999999999999,v1=" + goodHex, body, now, ErrMalformed},
		{"duplicate timestamp", []string{stripeSecretA}, t0 + "," + t0 + ",v1=" + goodHex, body, now, ErrMalformed},
		{"element without equals", []string{stripeSecretA}, good.Header + ",v1", body, now, ErrMalformed},
		{"trailing comma", []string{stripeSecretA}, good.Header + ",", body, now, ErrMalformed},
		{"empty key ignored, as Stripe does", []string{stripeSecretA}, "=1," + good.Header, body, now, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := NewStripe(tt.secrets, 5*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			var h Header
			if tt.header == "" {
				h = hdr()
			} else {
				h = hdr("stripe-signature", tt.header)
			}
			got := v.Verify(h, tt.body, unix(tt.now))
			checkErr(t, got, tt.want, append(tt.secrets, goodHex, otherHex)...)
		})
	}
}

// TestStripeCrossCheck: whatever Stripe's own library accepts, we accept,
// and vice versa for the headers Stripe produces.
func TestStripeCrossCheck(t *testing.T) {
	t.Parallel()
	v, err := NewStripe([]string{stripeSecretA}, webhook.DefaultTolerance)
	if err != nil {
		t.Fatal(err)
	}
	bodies := [][]byte{nil, []byte("{}"), []byte(`{"a":"ü\u0000"}`), bytes.Repeat([]byte("x"), 1<<16)}
	for i, body := range bodies {
		for _, age := range []time.Duration{0, time.Minute, -time.Minute, 10 * time.Minute} {
			now := time.Now()
			p := stripeSign(stripeSecretA, now.Add(-age).Unix(), body)
			theirs := webhook.ValidatePayloadWithTolerance(body, p.Header, stripeSecretA, webhook.DefaultTolerance)
			ours := v.Verify(hdr("Stripe-Signature", p.Header), body, now)
			if theirs == nil && ours != nil {
				t.Errorf("body %d age %s: stripe accepts, we return %v", i, age, ours)
			}
			// Stripe only rejects old timestamps; we also reject future ones.
			if theirs != nil && ours == nil {
				t.Errorf("body %d age %s: stripe returns %v, we accept", i, age, theirs)
			}
			if ignoring := webhook.ValidatePayloadIgnoringTolerance(body, p.Header, stripeSecretA); ignoring != nil {
				t.Fatalf("stripe rejects its own header: %v", ignoring)
			}
		}
	}
	// Rotation: Stripe sends one v1 per active secret.
	now := time.Now()
	a := stripeSign(stripeSecretA, now.Unix(), []byte("x"))
	b := stripeSign(stripeSecretB, now.Unix(), []byte("x"))
	header := a.Header + ",v1=" + hex.EncodeToString(b.Signature)
	if err := webhook.ValidatePayloadWithTolerance([]byte("x"), header, stripeSecretB, time.Minute); err != nil {
		t.Fatalf("stripe: %v", err)
	}
	vb, _ := NewStripe([]string{stripeSecretB}, time.Minute)
	if err := vb.Verify(hdr("Stripe-Signature", header), []byte("x"), now); err != nil {
		t.Fatalf("ours: %v", err)
	}
}

func TestParseStripe(t *testing.T) {
	t.Parallel()
	sig := strings.Repeat("ab", sha256.Size)
	tests := []struct {
		in    string
		ts    int64
		nsigs int
		want  error
	}{
		{"t=1,v1=" + sig, 1, 1, nil},
		{"t=0", 0, 0, nil},
		{"v1=" + sig + ",t=9223372036854775807,v1=" + sig + ",v0=" + sig, 9223372036854775807, 2, nil},
		{"t=9223372036854775808", 0, 0, ErrMalformed},
		{"", 0, 0, ErrMissing},
		{",", 0, 0, ErrMalformed},
		{"t", 0, 0, ErrMalformed},
		{"t=1,t=1", 0, 0, ErrMalformed},
	}
	for _, tt := range tests {
		ts, sigs, err := parseStripe(tt.in, nil)
		if tt.want != nil {
			checkErr(t, err, tt.want)
			continue
		}
		if err != nil || ts != tt.ts || len(sigs) != tt.nsigs {
			t.Errorf("parseStripe(%q) = %d, %d sigs, %v; want %d, %d sigs", tt.in, ts, len(sigs), err, tt.ts, tt.nsigs)
		}
	}
}

func TestNewStripeErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		secrets []string
		tol     time.Duration
		want    string
	}{
		{"nil secrets", nil, time.Minute, "no secrets"},
		{"empty secret", []string{stripeSecretA, ""}, time.Minute, "secrets[1]"},
		{"zero tolerance", []string{stripeSecretA}, 0, "tolerance"},
		{"negative tolerance", []string{stripeSecretA}, -time.Second, "tolerance"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewStripe(tt.secrets, tt.tol)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want mention of %q", err, tt.want)
			}
			checkMsg(t, err.Error(), stripeSecretA)
		})
	}
}
