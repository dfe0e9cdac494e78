package signature

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

func TestPresetSchemes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		id, typ Location
		tol     time.Duration
	}{
		{"slack", Location{Field: "event_id"}, Location{Field: "event.type", Fallback: "type"}, 0},
		{"twitch", Location{Header: HeaderTwitchMessageID}, Location{Header: HeaderTwitchSubscriptionType}, 10 * time.Minute},
		{"discord", Location{Field: "id"}, Location{Field: "type"}, 0},
	}
	for _, c := range cases {
		s, ok := Lookup(c.name)
		if !ok || s.ID != c.id || s.Type != c.typ || s.Tolerance != c.tol || s.Unsigned || s.Handshake == nil {
			t.Errorf("%s: %+v", c.name, s)
		}
		for _, k := range s.KeepHeaders {
			if k == HeaderSlackSignature || k == HeaderTwitchMessageSignature || k == HeaderDiscordSignature {
				t.Errorf("%s keeps its signature header", c.name)
			}
		}
	}
	d, _ := Lookup("discord")
	if err := d.CheckSecret("abc"); err == nil || !bytes.Contains([]byte(err.Error()), []byte("discord public key")) {
		t.Errorf("discord CheckSecret(abc) = %v", err)
	}
	if err := d.CheckSecret("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"); err != nil {
		t.Errorf("discord CheckSecret(valid) = %v", err)
	}
}

func TestHandshakes(t *testing.T) {
	t.Parallel()
	none := hdr()
	verification := hdr(HeaderTwitchMessageType, "webhook_callback_verification")
	cases := []struct {
		name   string
		hs     Handshake
		h      Header
		body   string
		ok     bool
		status int
		answer string
	}{
		{"slack challenge", slackHandshake, none, `{"type":"url_verification","challenge":"abc"}`, true, 0, "abc"},
		{"slack last type wins", slackHandshake, none, `{"type":"url_verification","type":"event_callback","challenge":"abc"}`, false, 0, ""},
		{"slack nested", slackHandshake, none, `{"type":"event_callback","event":{"type":"url_verification"}}`, false, 0, ""},
		{"slack no challenge", slackHandshake, none, `{"type":"url_verification"}`, true, 400, "invalid challenge\n"},
		{"slack challenge not a string", slackHandshake, none, `{"type":"url_verification","challenge":1}`, true, 400, "invalid challenge\n"},
		{"slack escaped challenge", slackHandshake, none, `{"type":"url_verification","challenge":"a\u0062c"}`, true, 0, "abc"},
		{"slack invalid json", slackHandshake, none, `{"type":"url_verification",}`, false, 0, ""},
		{"slack event", slackHandshake, none, `{"type":"event_callback","event_id":"Ev1"}`, false, 0, ""},
		{"twitch challenge", twitchHandshake, verification, `{"challenge":"pogchamp"}`, true, 0, "pogchamp"},
		{"twitch notification", twitchHandshake, hdr(HeaderTwitchMessageType, "notification"), `{"challenge":"x"}`, false, 0, ""},
		{"twitch long challenge", twitchHandshake, verification, `{"challenge":"` + string(bytes.Repeat([]byte("a"), MaxChallenge+1)) + `"}`, true, 400, "invalid challenge\n"},
		{"twitch control in challenge", twitchHandshake, verification, `{"challenge":"a\u0000b"}`, true, 400, "invalid challenge\n"},
		{"discord ping", discordHandshake, none, `{"type":1,"id":"1"}`, true, 0, `{"type":1}`},
		{"discord ping float", discordHandshake, none, `{"type":1.0}`, false, 0, ""},
		{"discord command", discordHandshake, none, `{"type":2}`, false, 0, ""},
		{"discord nested", discordHandshake, none, `{"data":{"type":1},"type":3}`, false, 0, ""},
		{"discord trailing data", discordHandshake, none, `{"type":1} {}`, false, 0, ""},
		{"discord case", discordHandshake, none, `{"TYPE":1,"type":2}`, false, 0, ""},
	}
	for _, c := range cases {
		a, ok := c.hs(c.h, []byte(c.body))
		if ok != c.ok || a.Status != c.status || string(a.Body) != c.answer {
			t.Errorf("%s: %v %d %q, want %v %d %q", c.name, ok, a.Status, a.Body, c.ok, c.status, c.answer)
		}
	}
}

// FuzzTopField: topField never panics and agrees with encoding/json
// decoding the body into a map (exact keys, the last duplicate wins); the
// challenge handshakes echo only what validChallenge allows.
func FuzzTopField(f *testing.F) {
	for _, s := range []string{
		`{"type":1}`, `{"type":"url_verification","challenge":"abc"}`, `{"type":1,"type":2}`,
		`{"TYPE":1}`, `{"a":{"type":1}}`, `[1]`, `{"type":1} x`, `{"ty\u0070e":1}`, `{}`, ``, `{"challenge":"a\u0000"}`,
	} {
		f.Add([]byte(s), "type")
	}
	f.Fuzz(func(t *testing.T, body []byte, name string) {
		raw, ok := topField(body, name)
		var m map[string]json.RawMessage
		err := json.Unmarshal(body, &m)
		isObject := err == nil && m != nil
		want, wantOK := m[name]
		if isObject && (ok != wantOK || ok && !bytes.Equal(compact(t, raw), compact(t, want))) {
			t.Fatalf("topField(%q, %q) = %q, %v; encoding/json %q, %v", body, name, raw, ok, want, wantOK)
		}
		if !isObject && ok {
			t.Fatalf("topField(%q) found a field in a non-object", body)
		}
		for _, hs := range []Handshake{slackHandshake, twitchHandshake} {
			a, ok := hs(hdr(HeaderTwitchMessageType, "webhook_callback_verification"), body)
			if ok && a.Status == 0 && !validChallenge(string(a.Body)) {
				t.Fatalf("echoed %q", a.Body)
			}
		}
	})
}

func compact(t *testing.T, raw []byte) []byte {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("compact %q: %v", raw, err)
	}
	return b.Bytes()
}
