package signature

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The vector of Svix's official Go library: svix/svix-webhooks
// go/webhook_test.go, TestWebhookSign (secret, message ID, timestamp,
// payload and expected signature); and its "valid multi sig is valid" case.
const (
	svixSecret  = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	svixMsgID   = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	svixTS      = 1614265330
	svixPayload = `{"test": 2432232314}`
	svixSig     = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	svixDecoy   = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="
)

func svixHdr(id, ts, sig string) Header {
	var kv []string
	for _, p := range [][2]string{{"svix-id", id}, {"svix-timestamp", ts}, {"svix-signature", sig}} {
		if p[1] != "" {
			kv = append(kv, p[0], p[1])
		}
	}
	return hdr(kv...)
}

func TestSvix(t *testing.T) {
	t.Parallel()
	ts := strconv.Itoa(svixTS)
	multi := strings.Join([]string{svixDecoy, "v2," + strings.TrimPrefix(svixDecoy, "v1,"), svixSig, svixDecoy}, " ")
	tests := []struct {
		name    string
		secrets []string
		h       Header
		body    string
		now     int64
		want    error
	}{
		{"vector", []string{svixSecret}, svixHdr(svixMsgID, ts, svixSig), svixPayload, svixTS, nil},
		{"multi sig", []string{svixSecret}, svixHdr(svixMsgID, ts, multi), svixPayload, svixTS, nil},
		{"rotated secret", []string{stdSecretB, svixSecret}, svixHdr(svixMsgID, ts, svixSig), svixPayload, svixTS, nil},
		{"v1a public key", []string{v1aPublic}, svixHdr(svixMsgID, ts, v1aSig), svixPayload, svixTS, nil},

		{"invalid signature", []string{svixSecret}, svixHdr(svixMsgID, ts, svixDecoy), svixPayload, svixTS, ErrMismatch},
		{"partial signature", []string{svixSecret}, svixHdr(svixMsgID, ts, "v1,"), svixPayload, svixTS, ErrMismatch},
		{"tampered payload", []string{svixSecret}, svixHdr(svixMsgID, ts, svixSig), svixPayload + " ", svixTS, ErrMismatch},
		{"old timestamp", []string{svixSecret}, svixHdr(svixMsgID, ts, svixSig), svixPayload, svixTS + 301, ErrTimestamp},
		{"new timestamp", []string{svixSecret}, svixHdr(svixMsgID, ts, svixSig), svixPayload, svixTS - 301, ErrTimestamp},
		{"missing id", []string{svixSecret}, svixHdr("", ts, svixSig), svixPayload, svixTS, ErrMissing},
		{"missing timestamp", []string{svixSecret}, svixHdr(svixMsgID, "", svixSig), svixPayload, svixTS, ErrMissing},
		{"missing signature", []string{svixSecret}, svixHdr(svixMsgID, ts, ""), svixPayload, svixTS, ErrMissing},
		{"bad timestamp", []string{svixSecret}, svixHdr(svixMsgID, "x"+ts, svixSig), svixPayload, svixTS, ErrMalformed},
		// Unbranded headers are the standard scheme's.
		{"webhook-* headers", []string{svixSecret},
			hdr("webhook-id", svixMsgID, "webhook-timestamp", ts, "webhook-signature", svixSig), svixPayload, svixTS, ErrMissing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := NewSvix(tt.secrets, 5*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			err = v.Verify(tt.h, []byte(tt.body), unix(tt.now))
			checkErr(t, err, tt.want, tt.secrets...)
			if err != nil && strings.Contains(err.Error(), "webhook-") {
				t.Errorf("svix error %q names the standard headers", err)
			}
		})
	}
	s, ok := Lookup("svix")
	if !ok || s.ID != (Location{Header: "svix-id"}) || s.Type != (Location{Field: "type"}) || s.CheckSecret(svixSecret) != nil {
		t.Fatalf("svix scheme: %+v", s)
	}
	if err := s.CheckSecret("whsk_x"); err == nil || !strings.HasPrefix(err.Error(), "invalid svix secret") {
		t.Fatalf("CheckSecret(whsk_) = %v", err)
	}
	if _, err := s.New(Params{Secrets: []string{svixSecret}, Tolerance: time.Minute}); err != nil {
		t.Fatal(err)
	}
}

// FuzzSvixVerify: any svix headers and body give nil or one sentinel, and
// nil only for the signed vector.
func FuzzSvixVerify(f *testing.F) {
	f.Add(svixMsgID, strconv.Itoa(svixTS), svixSig, []byte(svixPayload))
	f.Add(svixMsgID, strconv.Itoa(svixTS), svixDecoy+" "+v1aSig, []byte(svixPayload))
	f.Add("", "0", "v1,", []byte{})
	f.Add("a", "1", " \t ", []byte("x"))
	v, err := NewSvix([]string{svixSecret, v1aPublic}, 5*time.Minute)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		err := v.Verify(svixHdr(id, ts, sig), body, unix(svixTS))
		if err == nil {
			if id != svixMsgID || ts != strconv.Itoa(svixTS) || string(body) != svixPayload {
				t.Fatalf("accepted id %q ts %q body %q", id, ts, body)
			}
			return
		}
		if !isSentinel(err) {
			t.Fatalf("error %v wraps no single sentinel", err)
		}
		if errors.Is(err, ErrTimestamp) && ts == strconv.Itoa(svixTS) {
			t.Fatalf("timestamp error at the signed time: %v", err)
		}
	})
}
