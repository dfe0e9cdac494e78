package signature

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Test vector from the Standard Webhooks specification / reference libraries.
const (
	vecSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vecID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vecTS     = 1614265330
	vecBody   = `{"test": 2432232314}`
	vecSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

	stdSecretB = "whsec_c2Vjb25kIHNlY3JldCBrZXkgZm9yIHRlc3Rz" // "second secret key for tests"
)

func mustKey(t testing.TB, secret string) []byte {
	t.Helper()
	k, err := DecodeStandardSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSignStandardVector(t *testing.T) {
	t.Parallel()
	got := SignStandard(mustKey(t, vecSecret), vecID, unix(vecTS), []byte(vecBody))
	if got != vecSig {
		t.Fatalf("SignStandard = %q, want %q", got, vecSig)
	}
	v, err := NewStandard([]string{vecSecret}, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	h := hdr("webhook-id", vecID, "webhook-timestamp", strconv.Itoa(vecTS), "webhook-signature", vecSig)
	if err := v.Verify(h, []byte(vecBody), unix(vecTS)); err != nil {
		t.Fatalf("Verify(vector) = %v", err)
	}
}

func TestStandard(t *testing.T) {
	t.Parallel()
	const now = vecTS
	body := []byte(vecBody)
	good := vecSig
	other := SignStandard(mustKey(t, stdSecretB), vecID, unix(now), body)
	otherB64 := strings.TrimPrefix(other, "v1,")
	goodB64 := strings.TrimPrefix(good, "v1,")
	ts := strconv.Itoa(now)

	tests := []struct {
		name      string
		secrets   []string
		id, ts, s string // headers; "" means absent
		body      []byte
		now       int64
		want      error
	}{
		{"valid", []string{vecSecret}, vecID, ts, good, body, now, nil},
		{"secret without prefix", []string{strings.TrimPrefix(vecSecret, "whsec_")}, vecID, ts, good, body, now, nil},
		{"rotated secret second matches", []string{stdSecretB, vecSecret}, vecID, ts, good, body, now, nil},
		{"multiple v1 second matches", []string{vecSecret}, vecID, ts, other + " " + good, body, now, nil},
		{"multiple v1 first matches", []string{vecSecret}, vecID, ts, good + " " + other, body, now, nil},
		{"other versions ignored", []string{vecSecret}, vecID, ts, "v1a," + goodB64 + " v2,xyz " + good, body, now, nil},
		{"extra spaces", []string{vecSecret}, vecID, ts, "  " + other + "   " + good + " ", body, now, nil},
		{"invalid v1 ignored when another matches", []string{vecSecret}, vecID, ts, "v1,!!! junk " + good, body, now, nil},
		{"exactly tolerance old", []string{vecSecret}, vecID, ts, good, body, now + 300, nil},
		{"exactly tolerance ahead", []string{vecSecret}, vecID, ts, good, body, now - 300, nil},

		{"wrong secret", []string{stdSecretB}, vecID, ts, good, body, now, ErrMismatch},
		{"tampered body", []string{vecSecret}, vecID, ts, good, append(bytes.Clone(body), ' '), now, ErrMismatch},
		{"tampered id", []string{vecSecret}, vecID + "x", ts, good, body, now, ErrMismatch},
		{"tampered timestamp", []string{vecSecret}, vecID, strconv.Itoa(now + 1), good, body, now, ErrMismatch},
		{"v1a only", []string{vecSecret}, vecID, ts, "v1a," + goodB64, body, now, ErrMismatch},
		{"v1 not base64", []string{vecSecret}, vecID, ts, "v1,not-base64", body, now, ErrMismatch},
		{"v1 unpadded", []string{vecSecret}, vecID, ts, strings.TrimRight(good, "="), body, now, ErrMismatch},
		{"v1 url alphabet", []string{vecSecret}, vecID, ts, strings.NewReplacer("+", "-", "/", "_").Replace(good), body, now, ErrMismatch},
		{"v1 wrong length", []string{vecSecret}, vecID, ts, "v1," + base64.StdEncoding.EncodeToString([]byte("short")), body, now, ErrMismatch},
		{"forged and stale is mismatch", []string{stdSecretB}, vecID, ts, good, body, now + 3600, ErrMismatch},
		{"other secret's signature", []string{vecSecret}, vecID, ts, "v1," + otherB64, body, now, ErrMismatch},

		{"stale", []string{vecSecret}, vecID, ts, good, body, now + 301, ErrTimestamp},
		{"future", []string{vecSecret}, vecID, ts, good, body, now - 301, ErrTimestamp},

		{"missing signature", []string{vecSecret}, vecID, ts, "", body, now, ErrMissing},
		{"missing id", []string{vecSecret}, "", ts, good, body, now, ErrMissing},
		{"missing timestamp", []string{vecSecret}, vecID, "", good, body, now, ErrMissing},
		{"missing all", []string{vecSecret}, "", "", "", body, now, ErrMissing},
		{"timestamp not a number", []string{vecSecret}, vecID, "abc", good, body, now, ErrMalformed},
		{"timestamp signed", []string{vecSecret}, vecID, "+" + ts, good, body, now, ErrMalformed},
		{"timestamp leading zero", []string{vecSecret}, vecID, "0" + ts, good, body, now, ErrMalformed},
		{"timestamp milliseconds", []string{vecSecret}, vecID, ts + ".000", good, body, now, ErrMalformed},
		{"timestamp overflow", []string{vecSecret}, vecID, "99999999999999999999", good, body, now, ErrMalformed},
		{"signature without comma", []string{vecSecret}, vecID, ts, goodB64, body, now, ErrMalformed},
		{"signature garbage", []string{vecSecret}, vecID, ts, "v1 v2 v3", body, now, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := NewStandard(tt.secrets, 5*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			hh := http.Header{}
			for k, val := range map[string]string{"webhook-id": tt.id, "webhook-timestamp": tt.ts, "webhook-signature": tt.s} {
				if val != "" {
					hh.Set(k, val)
				}
			}
			got := v.Verify(hh.Get, tt.body, unix(tt.now))
			checkErr(t, got, tt.want, append(tt.secrets, goodB64, otherB64)...)
		})
	}
}

// TestStandardReference cross-checks with the reference Go library.
func TestStandardReference(t *testing.T) {
	t.Parallel()
	ref, err := standardwebhooks.NewWebhook(vecSecret)
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewStandard([]string{vecSecret}, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	key := mustKey(t, vecSecret)
	now := time.Now()
	ids := []string{vecID, "x", "msg with spaces", "ü.ñ", strings.Repeat("id", 100)}
	bodies := [][]byte{nil, []byte(vecBody), []byte("a.b.c\n\x00"), bytes.Repeat([]byte{0xff}, 4096)}
	stamps := []time.Time{unix(0), unix(vecTS), now, now.Add(-time.Minute), now.Add(time.Minute)}
	for _, id := range ids {
		for _, body := range bodies {
			for _, ts := range stamps {
				theirs, err := ref.Sign(id, ts, body)
				if err != nil {
					t.Fatal(err)
				}
				ours := SignStandard(key, id, ts, body)
				if ours != theirs {
					t.Fatalf("SignStandard(%q, %d) = %q, reference %q", id, ts.Unix(), ours, theirs)
				}
				hh := http.Header{}
				hh.Set(standardwebhooks.HeaderWebhookID, id)
				hh.Set(standardwebhooks.HeaderWebhookTimestamp, fmt.Sprint(ts.Unix()))
				hh.Set(standardwebhooks.HeaderWebhookSignature, theirs)
				if err := v.Verify(hh.Get, body, ts); err != nil {
					t.Fatalf("Verify(reference signature) = %v", err)
				}
				refErr := ref.Verify(body, hh)
				ourErr := v.Verify(hh.Get, body, now)
				if (refErr == nil) != (ourErr == nil) {
					t.Fatalf("ts %d: reference Verify = %v, ours = %v", ts.Unix(), refErr, ourErr)
				}
			}
		}
	}
}

func TestParseStandardSignatures(t *testing.T) {
	t.Parallel()
	s := base64.StdEncoding.EncodeToString(make([]byte, 32))
	tests := []struct {
		in    string
		nsigs int
		want  error
	}{
		{"v1," + s, 1, nil},
		{"v1," + s + " v1," + s + "\tv1a," + s, 2, nil},
		{"v2,abc", 0, nil},
		{",", 0, nil},
		{"", 0, ErrMissing},
		{"   ", 0, ErrMalformed},
		{"v1", 0, ErrMalformed},
	}
	for _, tt := range tests {
		sigs, err := parseStandardSignatures(tt.in, nil)
		if tt.want != nil {
			checkErr(t, err, tt.want)
			continue
		}
		if err != nil || len(sigs) != tt.nsigs {
			t.Errorf("parseStandardSignatures(%q) = %d sigs, %v; want %d", tt.in, len(sigs), err, tt.nsigs)
		}
	}
}

func TestNewStandardErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		secrets []string
		tol     time.Duration
		want    string
	}{
		{"nil secrets", nil, time.Minute, "no secrets"},
		{"empty secret", []string{vecSecret, ""}, time.Minute, "secrets[1]: empty"},
		{"prefix only", []string{"whsec_"}, time.Minute, "secrets[0]: empty"},
		{"not base64", []string{vecSecret, vecSecret, "whsec_not*base64"}, time.Minute, "secrets[2]: secret is not whsec_<base64>"},
		{"short key", []string{"whsec_c2hvcnQ="}, time.Minute, "secrets[0]: secret key shorter"},
		{"zero tolerance", []string{vecSecret}, 0, "tolerance"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewStandard(tt.secrets, tt.tol)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want mention of %q", err, tt.want)
			}
			checkMsg(t, err.Error(), tt.secrets...)
		})
	}
}
