package signature

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// The vector of Paddle's official Go SDK: PaddleHQ/paddle-go-sdk
// example_webhook_verifier_test.go (exampleSignature, examplePayload,
// exampleSecretKey).
const (
	paddleSecret    = `pdl_ntfset_01hsdn8d43dt7mezr1ef2jtbaw_hKkRiCGyyRhbFwIUuqiTBgI7gnWoV0Gr`
	paddleTS        = 1710929255
	paddleH1        = "6c05ef8fa83c44d751be6d259ec955ce5638e2c54095bf128e408e2fce1589c8"
	paddleSignature = `ts=1710929255;h1=` + paddleH1
	paddlePayload   = `{"data":{"id":"pri_01hsdn96k2hxjzsq5yerecdj9j","name":null,"status":"active","quantity":{"maximum":999999,"minimum":1},"tax_mode":"account_setting","product_id":"pro_01hsdn8qp7yydry3x1yeg6a9rv","unit_price":{"amount":"1000","currency_code":"USD"},"custom_data":null,"description":"testing","import_meta":null,"trial_period":null,"billing_cycle":{"interval":"month","frequency":1},"unit_price_overrides":[]},"event_id":"evt_01hsdn97563968dy0szkmgjwh3","event_type":"price.created","occurred_at":"2024-03-20T10:07:35.590857Z","notification_id":"ntf_01hsdn977e920kbgzt6r6c9rqc"}`
)

func TestPaddle(t *testing.T) {
	t.Parallel()
	const now = paddleTS
	other := strings.Repeat("ab", 32)
	ts := "ts=" + strconv.Itoa(paddleTS)
	tests := []struct {
		name    string
		secrets []string
		sig     string
		body    string
		now     int64
		want    error
	}{
		{"vector", []string{paddleSecret}, paddleSignature, paddlePayload, now, nil},
		{"rotation: second h1 matches", []string{paddleSecret}, ts + ";h1=" + other + ";h1=" + paddleH1, paddlePayload, now, nil},
		{"rotation: second secret matches", []string{"pdl_ntfset_other", paddleSecret}, paddleSignature, paddlePayload, now, nil},
		{"h1 before ts", []string{paddleSecret}, "h1=" + paddleH1 + ";" + ts, paddlePayload, now, nil},
		{"spaces around elements", []string{paddleSecret}, ts + " ; h1=" + paddleH1 + " ", paddlePayload, now, nil},
		{"upper-case hex", []string{paddleSecret}, ts + ";h1=" + strings.ToUpper(paddleH1), paddlePayload, now, nil},
		{"unknown keys ignored", []string{paddleSecret}, ts + ";h2=xyz;h1=" + paddleH1, paddlePayload, now, nil},
		{"exactly tolerance old", []string{paddleSecret}, paddleSignature, paddlePayload, now + 300, nil},

		{"wrong secret", []string{"pdl_ntfset_other"}, paddleSignature, paddlePayload, now, ErrMismatch},
		{"tampered body", []string{paddleSecret}, paddleSignature, paddlePayload + " ", now, ErrMismatch},
		{"tampered ts", []string{paddleSecret}, "ts=1710929256;h1=" + paddleH1, paddlePayload, now, ErrMismatch},
		{"no h1", []string{paddleSecret}, ts, paddlePayload, now, ErrMismatch},
		{"h1 not hex", []string{paddleSecret}, ts + ";h1=zz" + paddleH1[2:], paddlePayload, now, ErrMismatch},
		{"h1 short", []string{paddleSecret}, ts + ";h1=" + paddleH1[:62], paddlePayload, now, ErrMismatch},
		{"h1 past the eighth", []string{paddleSecret}, ts + strings.Repeat(";h1="+other, 8) + ";h1=" + paddleH1, paddlePayload, now, ErrMismatch},
		{"forged and stale is mismatch", []string{"pdl_ntfset_other"}, paddleSignature, paddlePayload, now + 3600, ErrMismatch},

		{"stale", []string{paddleSecret}, paddleSignature, paddlePayload, now + 301, ErrTimestamp},
		{"future", []string{paddleSecret}, paddleSignature, paddlePayload, now - 301, ErrTimestamp},

		{"missing", []string{paddleSecret}, "", paddlePayload, now, ErrMissing},
		{"no ts", []string{paddleSecret}, "h1=" + paddleH1, paddlePayload, now, ErrMalformed},
		{"two ts", []string{paddleSecret}, ts + ";" + paddleSignature, paddlePayload, now, ErrMalformed},
		{"ts milliseconds: another signed text", []string{paddleSecret}, "ts=1710929255000;h1=" + paddleH1, paddlePayload, now, ErrMismatch},
		{"ts not a number", []string{paddleSecret}, "ts=abc;h1=" + paddleH1, paddlePayload, now, ErrMalformed},
		{"ts signed", []string{paddleSecret}, "ts=+1710929255;h1=" + paddleH1, paddlePayload, now, ErrMalformed},
		{"comma separated", []string{paddleSecret}, ts + ",h1=" + paddleH1, paddlePayload, now, ErrMalformed},
		{"element without =", []string{paddleSecret}, paddleSignature + ";junk", paddlePayload, now, ErrMalformed},
		{"trailing semicolon", []string{paddleSecret}, paddleSignature + ";", paddlePayload, now, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := NewVerifier("paddle", Params{Secrets: tt.secrets, Tolerance: 5 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			h := hdr()
			if tt.sig != "" {
				h = hdr("Paddle-Signature", tt.sig)
			}
			checkErr(t, v.Verify(h, []byte(tt.body), unix(tt.now)), tt.want, tt.secrets...)
		})
	}
	s, _ := Lookup("paddle")
	if s.ID != (Location{Field: "event_id"}) || s.Type != (Location{Field: "event_type"}) {
		t.Fatalf("paddle scheme: %+v", s)
	}
}
