package signature

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The example of Slack's "Verifying requests from Slack"
// (https://docs.slack.dev/authentication/verifying-requests-from-slack/),
// also the vector of python-slack-sdk's tests/slack_sdk/signature/test_signature_verifier.py.
const (
	slackDocSecret    = "8f742231b10e8888abcd99yyyzzz85a5"
	slackDocTimestamp = "1531420618"
	slackDocSignature = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
	slackDocBody      = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
)

func TestSlackDocumentedVector(t *testing.T) {
	t.Parallel()
	if got := SignSlack(slackDocSecret, 1531420618, []byte(slackDocBody)); got != slackDocSignature {
		t.Fatalf("SignSlack = %s, want the documented %s", got, slackDocSignature)
	}
	v, err := NewSlack([]string{slackDocSecret}, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	h := hdr(HeaderSlackSignature, slackDocSignature, HeaderSlackTimestamp, slackDocTimestamp)
	checkErr(t, v.Verify(h, []byte(slackDocBody), unix(1531420618)), nil)
	// As python-slack-sdk: a changed body fails, the real clock is too late.
	checkErr(t, v.Verify(h, []byte(slackDocBody+"------"), unix(1531420618)), ErrMismatch, slackDocSecret)
	checkErr(t, v.Verify(h, []byte(slackDocBody), time.Now()), ErrTimestamp, slackDocSecret)
}

func TestSlack(t *testing.T) {
	t.Parallel()
	const now = 1700000000
	const secretA, secretB = "slack-secret-a-0123456789", "slack-secret-b-9876543210"
	body := []byte(`{"type":"event_callback","event_id":"Ev1","event":{"type":"app_mention"}}`)
	good := SignSlack(secretA, now, body)
	other := SignSlack(secretB, now, body)
	ts := "1700000000"
	tests := []struct {
		name    string
		secrets []string
		sig, ts string
		body    []byte
		now     int64
		want    error
	}{
		{"valid", []string{secretA}, good, ts, body, now, nil},
		{"rotated secret second matches", []string{secretB, secretA}, good, ts, body, now, nil},
		{"uppercase hex", []string{secretA}, "v0=" + strings.ToUpper(good[3:]), ts, body, now, nil},
		{"exactly tolerance old", []string{secretA}, good, ts, body, now + 300, nil},
		{"exactly tolerance ahead", []string{secretA}, good, ts, body, now - 300, nil},

		{"wrong secret", []string{secretA}, other, ts, body, now, ErrMismatch},
		{"tampered body", []string{secretA}, good, ts, append(bytes.Clone(body), ' '), now, ErrMismatch},
		{"tampered timestamp", []string{secretA}, good, "1700000001", body, now, ErrMismatch},
		{"other version", []string{secretA}, "v1=" + good[3:], ts, body, now, ErrMismatch},
		{"no prefix", []string{secretA}, good[3:], ts, body, now, ErrMismatch},
		{"truncated", []string{secretA}, good[:len(good)-2], ts, body, now, ErrMismatch},
		{"forged and stale is mismatch", []string{secretB}, good, ts, body, now + 3600, ErrMismatch},

		{"stale", []string{secretA}, good, ts, body, now + 301, ErrTimestamp},
		{"future", []string{secretA}, good, ts, body, now - 301, ErrTimestamp},

		{"missing signature", []string{secretA}, "", ts, body, now, ErrMissing},
		{"missing timestamp", []string{secretA}, good, "", body, now, ErrMissing},
		{"timestamp not a number", []string{secretA}, good, "abc", body, now, ErrMalformed},
		{"timestamp leading zero", []string{secretA}, good, "01700000000", body, now, ErrMalformed},
		{"timestamp signed", []string{secretA}, good, "+1700000000", body, now, ErrMalformed},
		{"timestamp millis", []string{secretA}, good, "1700000000000000000000", body, now, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, err := NewSlack(tt.secrets, 5*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			var kv []string
			if tt.sig != "" {
				kv = append(kv, HeaderSlackSignature, tt.sig)
			}
			if tt.ts != "" {
				kv = append(kv, HeaderSlackTimestamp, tt.ts)
			}
			checkErr(t, v.Verify(hdr(kv...), tt.body, unix(tt.now)), tt.want, tt.secrets...)
		})
	}
}

func TestNewSlackRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		secrets []string
		tol     time.Duration
	}{
		{"no secrets", nil, time.Minute},
		{"empty secret", []string{""}, time.Minute},
		{"zero tolerance", []string{"s"}, 0},
	} {
		if _, err := NewSlack(tc.secrets, tc.tol); err == nil {
			t.Errorf("%s: NewSlack accepted", tc.name)
		}
	}
}

// FuzzSlackHeaders: parsing never panics, errors wrap one sentinel, a parsed
// signature re-formats and parses back identically, and what SignSlack signs
// for any secret, time and body, Verify accepts.
func FuzzSlackHeaders(f *testing.F) {
	f.Add(slackDocSignature, slackDocTimestamp, slackDocSecret, []byte(slackDocBody))
	f.Add("v0=", "0", "x", []byte(nil))
	f.Add("v1="+slackDocSignature[3:], "01531420618", "s", []byte("{}"))
	f.Add("v0="+strings.ToUpper(slackDocSignature[3:]), "9223372036854775807", "s", []byte("v0:1:"))
	f.Fuzz(func(t *testing.T, sigHdr, tsHdr, secret string, body []byte) {
		sig, err := parseSlackSignature(sigHdr)
		if err != nil {
			if !isSentinel(err) {
				t.Fatalf("parse signature: %v wraps no single sentinel", err)
			}
		} else if again, err := parseSlackSignature(fmt.Sprintf("v0=%x", sig)); err != nil || again != sig {
			t.Fatalf("%q did not round-trip: %v", sigHdr, err)
		}
		ts, err := parseSlackTimestamp(tsHdr)
		if err != nil {
			if !isSentinel(err) {
				t.Fatalf("parse timestamp: %v wraps no single sentinel", err)
			}
			ts = 0
		} else if strconv.FormatInt(ts, 10) != tsHdr {
			t.Fatalf("timestamp %q parsed to %d", tsHdr, ts)
		}
		if secret == "" {
			return
		}
		ts &= 1<<40 - 1
		v, err := NewSlack([]string{"other", secret}, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		h := hdr(HeaderSlackSignature, SignSlack(secret, ts, body), HeaderSlackTimestamp, strconv.FormatInt(ts, 10))
		if err := v.Verify(h, body, unix(ts)); err != nil {
			t.Fatalf("Verify(SignSlack) = %v", err)
		}
		if err := v.Verify(hdr(HeaderSlackSignature, sigHdr, HeaderSlackTimestamp, tsHdr), body, unix(ts)); err != nil && !isSentinel(err) {
			t.Fatalf("Verify: %v wraps no single sentinel", err)
		}
	})
}
