package signature

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"testing"
	"time"
)

var benchBody = bytes.Repeat([]byte(`{"k":"v"},`), 1024/10+1)[:1024] // 1 KiB

// mapHeader is a cheap Header for benchmarks (no canonicalisation cost).
func mapHeader(kv map[string]string) Header {
	return func(name string) string { return kv[name] }
}

func benchVerify(b *testing.B, v Verifier, h Header, now time.Time) {
	b.Helper()
	if err := v.Verify(h, benchBody, now); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(benchBody)))
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Verify(h, benchBody, now); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyStripe(b *testing.B) {
	const ts = 1700000000
	v, err := NewStripe([]string{stripeSecretA}, 5*time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	p := stripeSign(stripeSecretA, ts, benchBody)
	benchVerify(b, v, mapHeader(map[string]string{HeaderStripeSignature: p.Header}), unix(ts))
}

// BenchmarkVerifyStripeRotated: two secrets, two v1 entries, the second
// secret matches the second entry (the worst valid case during rotation).
func BenchmarkVerifyStripeRotated(b *testing.B) {
	const ts = 1700000000
	v, err := NewStripe([]string{stripeSecretA, stripeSecretB}, 5*time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	p := stripeSign(stripeSecretB, ts, benchBody)
	header := "t=1700000000,v1=" + hex.EncodeToString(make([]byte, 32)) + ",v1=" + hex.EncodeToString(p.Signature)
	benchVerify(b, v, mapHeader(map[string]string{HeaderStripeSignature: header}), unix(ts))
}

func BenchmarkVerifyStandard(b *testing.B) {
	v, err := NewStandard([]string{vecSecret}, 5*time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	sig := SignStandard(mustKey(b, vecSecret), vecID, unix(vecTS), benchBody)
	benchVerify(b, v, mapHeader(map[string]string{
		HeaderWebhookID:        vecID,
		HeaderWebhookTimestamp: strconv.Itoa(vecTS),
		HeaderWebhookSignature: sig,
	}), unix(vecTS))
}

func BenchmarkVerifyGitHub(b *testing.B) {
	v, err := NewGitHub([]string{ghSecret})
	if err != nil {
		b.Fatal(err)
	}
	sig := encodeSignature(hmacSum(sha256.New, ghSecret, benchBody), "sha256=", false)
	benchVerify(b, v, mapHeader(map[string]string{HeaderGitHubSignature: sig}), time.Time{})
}

func BenchmarkVerifyHMACSHA512Base64(b *testing.B) {
	v, err := NewHMAC([]string{ghSecret}, HMACOptions{Header: "X-Sig", Algorithm: "sha512", Encoding: "base64"})
	if err != nil {
		b.Fatal(err)
	}
	sig := base64.StdEncoding.EncodeToString(hmacSum(sha512.New, ghSecret, benchBody))
	benchVerify(b, v, mapHeader(map[string]string{"X-Sig": sig}), time.Time{})
}

// BenchmarkVerifyStripeForged: the cost of rejecting a forged request.
func BenchmarkVerifyStripeForged(b *testing.B) {
	v, err := NewStripe([]string{stripeSecretA}, 5*time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	h := mapHeader(map[string]string{HeaderStripeSignature: "t=1700000000,v1=" + hex.EncodeToString(make([]byte, 32))})
	b.SetBytes(int64(len(benchBody)))
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Verify(h, benchBody, unix(1700000000)); err == nil {
			b.Fatal("forged request accepted")
		}
	}
}

func BenchmarkSignStandard(b *testing.B) {
	key := mustKey(b, vecSecret)
	ts := unix(vecTS)
	b.SetBytes(int64(len(benchBody)))
	b.ReportAllocs()
	for b.Loop() {
		_ = SignStandard(key, vecID, ts, benchBody)
	}
}

// BenchmarkVerifyStandardV1a: an ed25519 (v1a) signature and a whpk_ key.
func BenchmarkVerifyStandardV1a(b *testing.B) {
	v, err := NewStandard([]string{v1aPublic}, 5*time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	benchVerify(b, v, mapHeader(map[string]string{
		HeaderWebhookID:        vecID,
		HeaderWebhookTimestamp: strconv.Itoa(vecTS),
		HeaderWebhookSignature: signV1a(v1aPrivate(b), vecID, vecTS, string(benchBody)),
	}), unix(vecTS))
}

func BenchmarkVerifyPaddle(b *testing.B) {
	const ts = 1700000000
	v, err := NewPaddle([]string{paddleSecret}, 5*time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	benchVerify(b, v, mapHeader(map[string]string{HeaderPaddleSignature: paddleSign(paddleSecret, ts, benchBody)}), unix(ts))
}
