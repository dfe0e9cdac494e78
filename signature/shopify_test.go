package signature

import (
	"encoding/base64"
	"encoding/hex"
	"testing"
	"time"
)

// The vector of Shopify's official JavaScript library: Shopify/shopify-app-js
// packages/apps/shopify-api/lib/webhooks/__tests__/validate.test.ts
// ("returns true for valid request": body {"foo": "bar"}, HMAC
// B23tXN68...) with the secret of lib/__tests__/test-config.ts.
const (
	shopifySecret = "test_secret_key"
	shopifyBody   = `{"foo": "bar"}`
	shopifyHmac   = "B23tXN681gZ0qIWNRrgtzBE9XSDo5yaUu6wfmhu3a7g="
)

func TestShopify(t *testing.T) {
	t.Parallel()
	raw, _ := base64.StdEncoding.DecodeString(shopifyHmac)
	tests := []struct {
		name    string
		secrets []string
		sig     string
		body    string
		want    error
	}{
		{"vector", []string{shopifySecret}, shopifyHmac, shopifyBody, nil},
		{"old secret during rotation", []string{"new_secret_key", shopifySecret}, shopifyHmac, shopifyBody, nil},
		{"wrong secret", []string{"other"}, shopifyHmac, shopifyBody, ErrMismatch},
		{"tampered body", []string{shopifySecret}, shopifyHmac, `{"foo":"bar"}`, ErrMismatch},
		{"missing", []string{shopifySecret}, "", shopifyBody, ErrMissing},
		{"hex instead of base64", []string{shopifySecret}, hex.EncodeToString(raw), shopifyBody, ErrMalformed},
		{"unpadded", []string{shopifySecret}, shopifyHmac[:len(shopifyHmac)-1], shopifyBody, ErrMalformed},
		{"prefixed", []string{shopifySecret}, "sha256=" + shopifyHmac, shopifyBody, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := NewVerifier("shopify", Params{Secrets: tt.secrets, Tolerance: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			h := hdr()
			if tt.sig != "" {
				h = hdr("X-Shopify-Hmac-Sha256", tt.sig)
			}
			// Shopify signs no timestamp: any clock.
			checkErr(t, v.Verify(h, []byte(tt.body), time.Time{}), tt.want, tt.secrets...)
		})
	}
	s, _ := Lookup("shopify")
	if s.ID != (Location{Header: "X-Shopify-Webhook-Id"}) || s.Type != (Location{Header: "X-Shopify-Topic"}) {
		t.Fatalf("shopify scheme: %+v", s)
	}
}
