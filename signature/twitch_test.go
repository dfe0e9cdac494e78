package signature

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Twitch's documented example of a verification request ("Handling webhook
// events", https://dev.twitch.tv/docs/eventsub/handling-webhook-events/):
// its message id, timestamp and challenge body. The signature is HMAC-SHA256
// over id + timestamp + body, as that page's example code and twitch-cli's
// getSignatureHeader (internal/events/trigger/forward_event.go) compute it;
// the value below was computed with OpenSSL (openssl dgst -sha256 -hmac).
const (
	twitchDocID        = "e76c6bd4-55c9-4987-8304-da1588d8988b"
	twitchDocTimestamp = "2019-11-16T10:11:12.634234626Z"
	twitchDocSecret    = "s3cRe7"
	twitchDocBody      = `{"challenge":"pogchamp-kappa-360noscope-vohiyo","subscription":{"id":"f1c2a387-161a-49f9-a165-0f21d7a4e1c4","status":"webhook_callback_verification_pending","type":"channel.follow","version":"1","cost":1,"condition":{"broadcaster_user_id":"12826"},"transport":{"method":"webhook","callback":"https://example.com/webhooks/callback"},"created_at":"2019-11-16T10:11:12.634234626Z"}}`
	twitchDocSignature = "sha256=37214ccb052869a5bfc9e4793d113fb31b0f79376cbf1df6d22f413f0f380a36"
)

func twitchHdr(sig, id, ts string) Header {
	var kv []string
	for _, p := range [][2]string{
		{HeaderTwitchMessageSignature, sig}, {HeaderTwitchMessageID, id}, {HeaderTwitchMessageTimestamp, ts},
	} {
		if p[1] != "" {
			kv = append(kv, p[0], p[1])
		}
	}
	return hdr(kv...)
}

func TestTwitchDocumentedVector(t *testing.T) {
	t.Parallel()
	if got := SignTwitch(twitchDocSecret, twitchDocID, twitchDocTimestamp, []byte(twitchDocBody)); got != twitchDocSignature {
		t.Fatalf("SignTwitch = %s, want %s", got, twitchDocSignature)
	}
	v, err := NewTwitch([]string{twitchDocSecret}, DefaultTwitchTolerance)
	if err != nil {
		t.Fatal(err)
	}
	sent, err := time.Parse(time.RFC3339Nano, twitchDocTimestamp)
	if err != nil {
		t.Fatal(err)
	}
	h := twitchHdr(twitchDocSignature, twitchDocID, twitchDocTimestamp)
	checkErr(t, v.Verify(h, []byte(twitchDocBody), sent.Add(10*time.Minute)), nil)
	checkErr(t, v.Verify(h, []byte(twitchDocBody), sent.Add(10*time.Minute+time.Nanosecond)), ErrTimestamp, twitchDocSecret)
	checkErr(t, v.Verify(h, []byte(twitchDocBody+" "), sent), ErrMismatch, twitchDocSecret)
}

func TestTwitch(t *testing.T) {
	t.Parallel()
	const secretA, secretB = "twitch-secret-a-0123", "twitch-secret-b-3210"
	const id, ts = "msg-1", "2023-11-14T22:13:20.123456789Z"
	sent, _ := time.Parse(time.RFC3339Nano, ts)
	body := []byte(`{"subscription":{"type":"channel.follow"},"event":{"user_id":"1"}}`)
	good := SignTwitch(secretA, id, ts, body)
	other := SignTwitch(secretB, id, ts, body)
	// The same instant written another way is other signed bytes.
	const tsOffset = "2023-11-14T23:13:20.123456789+01:00"
	goodOffset := SignTwitch(secretA, id, tsOffset, body)
	tests := []struct {
		name        string
		secrets     []string
		sig, id, ts string
		body        []byte
		now         time.Time
		want        error
	}{
		{"valid", []string{secretA}, good, id, ts, body, sent, nil},
		{"rotated secret second matches", []string{secretB, secretA}, good, id, ts, body, sent, nil},
		{"uppercase hex", []string{secretA}, "sha256=" + strings.ToUpper(good[7:]), id, ts, body, sent, nil},
		{"offset timestamp", []string{secretA}, goodOffset, id, tsOffset, body, sent, nil},
		{"exactly tolerance old", []string{secretA}, good, id, ts, body, sent.Add(10 * time.Minute), nil},
		{"exactly tolerance ahead", []string{secretA}, good, id, ts, body, sent.Add(-10 * time.Minute), nil},

		{"wrong secret", []string{secretA}, other, id, ts, body, sent, ErrMismatch},
		{"tampered body", []string{secretA}, good, id, ts, append(bytes.Clone(body), ' '), sent, ErrMismatch},
		{"tampered id", []string{secretA}, good, "msg-2", ts, body, sent, ErrMismatch},
		{"timestamp rewritten", []string{secretA}, good, id, tsOffset, body, sent, ErrMismatch},
		{"no prefix", []string{secretA}, good[7:], id, ts, body, sent, ErrMismatch},
		{"sha1 prefix", []string{secretA}, "sha1=" + good[7:], id, ts, body, sent, ErrMismatch},
		{"truncated", []string{secretA}, good[:len(good)-1], id, ts, body, sent, ErrMismatch},
		{"forged and stale is mismatch", []string{secretB}, good, id, ts, body, sent.Add(time.Hour), ErrMismatch},

		{"stale", []string{secretA}, good, id, ts, body, sent.Add(10*time.Minute + time.Second), ErrTimestamp},
		{"future", []string{secretA}, good, id, ts, body, sent.Add(-10*time.Minute - time.Second), ErrTimestamp},

		{"missing signature", []string{secretA}, "", id, ts, body, sent, ErrMissing},
		{"missing id", []string{secretA}, good, "", ts, body, sent, ErrMissing},
		{"missing timestamp", []string{secretA}, good, id, "", body, sent, ErrMissing},
		{"unix timestamp", []string{secretA}, good, id, "1700000000", body, sent, ErrMalformed},
		{"timestamp without zone", []string{secretA}, good, id, "2023-11-14T22:13:20", body, sent, ErrMalformed},
		{"timestamp too long", []string{secretA}, good, id, ts + strings.Repeat("0", 64), body, sent, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, err := NewTwitch(tt.secrets, DefaultTwitchTolerance)
			if err != nil {
				t.Fatal(err)
			}
			checkErr(t, v.Verify(twitchHdr(tt.sig, tt.id, tt.ts), tt.body, tt.now), tt.want, tt.secrets...)
		})
	}
}

func TestNewTwitchRefuses(t *testing.T) {
	t.Parallel()
	if _, err := NewTwitch(nil, time.Minute); err == nil {
		t.Error("no secrets accepted")
	}
	if _, err := NewTwitch([]string{""}, time.Minute); err == nil {
		t.Error("empty secret accepted")
	}
	if _, err := NewTwitch([]string{"s"}, 0); err == nil {
		t.Error("zero tolerance accepted")
	}
}

// FuzzTwitchHeaders: parsing never panics, errors wrap one sentinel, only
// bounded RFC 3339 times parse, and what SignTwitch signs Verify accepts.
func FuzzTwitchHeaders(f *testing.F) {
	f.Add(twitchDocSignature, twitchDocID, twitchDocTimestamp, twitchDocSecret, []byte(twitchDocBody))
	f.Add("sha256=", "", "", "x", []byte(nil))
	f.Add("sha256="+strings.ToUpper(twitchDocSignature[7:]), "id", "2019-11-16T10:11:12+01:00", "s", []byte("{}"))
	f.Add("sha1=00", "id", "2019-11-16T10:11:12.1234567890Z", "s", []byte("{}"))
	f.Add("", "id", "9999-12-31T23:59:59.999999999-23:59", "s", []byte("{}"))
	f.Fuzz(func(t *testing.T, sigHdr, id, tsHdr, secret string, body []byte) {
		if sig, err := parseTwitchSignature(sigHdr); err != nil {
			if !isSentinel(err) {
				t.Fatalf("parse signature: %v wraps no single sentinel", err)
			}
		} else if again, err := parseTwitchSignature(fmt.Sprintf("sha256=%x", sig)); err != nil || again != sig {
			t.Fatalf("%q did not round-trip: %v", sigHdr, err)
		}
		ts, err := parseTwitchTimestamp(tsHdr)
		if err != nil {
			if !isSentinel(err) {
				t.Fatalf("parse timestamp: %v wraps no single sentinel", err)
			}
			ts = time.Unix(1700000000, 0)
			tsHdr = ts.UTC().Format(time.RFC3339Nano)
		} else if len(tsHdr) > maxTwitchTimestamp {
			t.Fatalf("timestamp of %d bytes parsed", len(tsHdr))
		}
		if secret == "" || id == "" || !validHeaderValue(id) {
			return
		}
		v, err := NewTwitch([]string{"other", secret}, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		h := twitchHdr(SignTwitch(secret, id, tsHdr, body), id, tsHdr)
		if err := v.Verify(h, body, ts); err != nil {
			t.Fatalf("Verify(SignTwitch) = %v", err)
		}
		if err := v.Verify(twitchHdr(sigHdr, id, tsHdr), body, ts); err != nil && !isSentinel(err) {
			t.Fatalf("Verify: %v wraps no single sentinel", err)
		}
	})
}

// validHeaderValue reports whether http.Header keeps v as it is (hdr's
// lookup trims and the fuzzer's strings may hold anything).
func validHeaderValue(v string) bool {
	return v == strings.TrimSpace(v) && !strings.ContainsAny(v, "\r\n\x00")
}
