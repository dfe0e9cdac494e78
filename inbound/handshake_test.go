package inbound

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/hookgate/hookgate/signature"
)

const challengeSecret = "challenge-secret"

// A scheme with a handshake, as a provider preset declares one: a signed
// request carrying X-Challenge is the provider checking the endpoint and
// is answered with the challenge; when the body starts with "echo:" the
// answer is the body itself (aliasing the request's buffer).
func init() {
	signature.Register(signature.Scheme{
		Name: "test-challenge",
		ID:   signature.Location{Header: "X-Id"},
		New: func(p signature.Params) (signature.Verifier, error) {
			return signature.NewHMAC(p.Secrets, signature.HMACOptions{Header: "X-Signature"})
		},
		Handshake: func(h signature.Header, body []byte) (signature.Answer, bool) {
			if bytes.HasPrefix(body, []byte("echo:")) {
				return signature.Answer{ContentType: "application/octet-stream", Body: body}, true
			}
			c := h("X-Challenge")
			if c == "" {
				return signature.Answer{}, false
			}
			if c == "bad" {
				return signature.Answer{Status: http.StatusBadRequest, Body: []byte("bad challenge")}, true
			}
			return signature.Answer{Body: []byte(c)}, true
		},
	})
}

func challengeSign(body []byte) string {
	m := hmac.New(sha256.New, []byte(challengeSecret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

func TestHandshake(t *testing.T) {
	t.Parallel()
	h := newHarnessFor(t, []Source{{Name: "chal", Verify: "test-challenge", Secrets: []string{challengeSecret}}}, Options{})
	do := func(body []byte, hdr map[string]string) (int, string, http.Header) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, h.url+"/webhooks/chal", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw), resp.Header
	}
	body := []byte(`{"x":1}`)

	// A signed challenge is answered by the handshake and not stored.
	status, got, hdr := do(body, map[string]string{"X-Signature": challengeSign(body), "X-Challenge": "c-123", "X-Id": "e1"})
	if status != 200 || got != "c-123" || hdr.Get("Content-Type") != "text/plain; charset=utf-8" || hdr.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("challenge: %d %q %v", status, got, hdr)
	}
	// The handshake's own status.
	if status, got, _ = do(body, map[string]string{"X-Signature": challengeSign(body), "X-Challenge": "bad", "X-Id": "e1"}); status != 400 || got != "bad challenge" {
		t.Fatalf("bad challenge: %d %q", status, got)
	}
	// An answer aliasing the request body arrives intact.
	echo := []byte("echo:" + string(bytes.Repeat([]byte("abc"), 2000)))
	if status, got, _ = do(echo, map[string]string{"X-Signature": challengeSign(echo)}); status != 200 || got != string(echo) {
		t.Fatalf("echo: %d, %d bytes", status, len(got))
	}
	// The signature is checked first: a forged challenge is refused.
	if status, _, _ = do(body, map[string]string{"X-Signature": challengeSign([]byte("other")), "X-Challenge": "c-123", "X-Id": "e1"}); status != 401 {
		t.Fatalf("forged challenge: %d, want 401", status)
	}
	if n := h.count(t); n != 0 {
		t.Fatalf("%d events stored by handshakes, want 0", n)
	}
	if n := testutil.ToFloat64(h.metrics.requests.WithLabelValues("chal", OutcomeHandshake)); n != 3 {
		t.Fatalf("handshakes counted %v, want 3", n)
	}

	// Without a challenge the request is an event.
	if status, got, _ = do(body, map[string]string{"X-Signature": challengeSign(body), "X-Id": "e1"}); status != 200 {
		t.Fatalf("event: %d %q", status, got)
	}
	if ev := h.stored(t, "chal", "e1"); ev == nil || string(ev.Body) != string(body) {
		t.Fatalf("event not stored: %+v", ev)
	}
}
