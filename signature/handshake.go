package signature

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
)

// MaxChallenge is the longest challenge a handshake echoes, in bytes.
// Providers send a few dozen characters.
const MaxChallenge = 1024

// topField returns the raw JSON value of the member name of body's
// top-level object, and whether body is one valid JSON object holding it.
// Keys match exactly and the last of duplicate keys wins, as inbound's
// lookupJSON and encoding/json's maps have it.
func topField(body []byte, name string) (json.RawMessage, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	var found json.RawMessage
	ok := false
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, false
		}
		key, _ := t.(string) // the decoder only gives a string here
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		if key == name {
			found, ok = v, true
		}
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false
	}
	return found, ok
}

// topString returns the top-level member name of body if it is a string.
func topString(body []byte, name string) (string, bool) {
	raw, ok := topField(body, name)
	if !ok || len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// validChallenge reports whether c may be echoed as it is: 1 to
// MaxChallenge printable ASCII characters, no space.
func validChallenge(c string) bool {
	if c == "" || len(c) > MaxChallenge {
		return false
	}
	for i := 0; i < len(c); i++ {
		if c[i] <= ' ' || c[i] > '~' {
			return false
		}
	}
	return true
}

// challengeAnswer answers a challenge handshake with the challenge as text,
// or 400 if it cannot be echoed.
func challengeAnswer(c string, ok bool) Answer {
	if !ok || !validChallenge(c) {
		return Answer{Status: http.StatusBadRequest, Body: []byte("invalid challenge\n")}
	}
	return Answer{Body: []byte(c)}
}
