package inbound

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// signedStripe is a Stripe request for the raw body, signed now.
func (h *harness) signedStripe(t *testing.T, body []byte) answer {
	t.Helper()
	return h.post(t, "stripe", body, stripeHeader(body, stripeSecret, h.clock()))
}

// rawPost sends a request with the header lines given as written (so that
// values net/http refuses to send can be tried) and reads the answer.
func (h *harness) rawPost(t *testing.T, source string, headerLines []string, body []byte) answer {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	var req bytes.Buffer
	fmt.Fprintf(&req, "POST /webhooks/%s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n", source, len(body))
	for _, l := range headerLines {
		req.WriteString(l + "\r\n")
	}
	req.WriteString("\r\n")
	req.Write(body)
	if _, err := conn.Write(req.Bytes()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode}
	if err := json.NewDecoder(resp.Body).Decode(&a.body); err != nil {
		t.Fatalf("answer %d is not JSON: %v", resp.StatusCode, err)
	}
	return a
}

// A type that cannot travel in a subject or a header, or is not one exact
// text, is refused at the door; nothing is stored.
func TestEventTypeRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	raw := func(typ string) []byte { // typ as written inside the JSON string
		return []byte(`{"id":"evt_t","object":"event","type":"` + typ + `"}`)
	}
	tests := []struct {
		name string
		body []byte
	}{
		{"4060 characters", stripeEvent("evt_t", "invoice."+strings.Repeat("x", 4052))},
		{"256 bytes", stripeEvent("evt_t", strings.Repeat("t", 256))},
		{"U+0001", raw(`a\u0001b`)},
		{"U+0000", raw(`a\u0000b`)},
		{"DEL", raw("a\x7fb")},
		{"line break", raw(`a\nb`)},
		{"tab", raw(`a\tb`)},
		{"C1 control", raw(`a\u0085b`)},
		{"leading space", raw(` a`)},
		{"trailing space", raw(`a `)},
		{"invalid utf-8", raw("a\xffb")},
		{"lone high surrogate", raw(`a\ud800`)},
		{"lone low surrogate", raw(`\udfff`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := h.signedStripe(t, tt.body)
			if a.status != 400 || a.code() != "invalid_event_type" {
				t.Fatalf("got %d %q (%v), want 400 invalid_event_type", a.status, a.code(), a.body)
			}
		})
	}
	// The type from a header is held to the same rules.
	for name, typ := range map[string]string{"header DEL": "push\x7f", "header invalid utf-8": "push\xff",
		"header too long": strings.Repeat("p", 256)} {
		t.Run(name, func(t *testing.T) {
			body := []byte(`{}`)
			var lines []string
			for k, v := range githubHeaders(githubSecret, "d-1", typ, body) {
				lines = append(lines, k+": "+v)
			}
			a := h.rawPost(t, "gh", lines, body)
			if a.status != 400 || a.code() != "invalid_event_type" {
				t.Fatalf("got %d %q (%v), want 400 invalid_event_type", a.status, a.code(), a.body)
			}
		})
	}
	if n := h.count(t); n != 0 {
		t.Fatalf("refused requests stored %d events, want 0", n)
	}
	// The longest type and one with a character outside ASCII are accepted.
	for _, typ := range []string{strings.Repeat("t", 255), "facture.payée"} {
		if a := h.signedStripe(t, stripeEvent("evt_ok_"+typ[:3], typ)); a.status != 200 || a.body["event_type"] != typ {
			t.Fatalf("type of %d bytes: got %d %v, want 200", len(typ), a.status, a.body)
		}
	}
}

// A Content-Type with a control character is refused at the door.
// fasthttp passes such values to the handler as they came.
func TestContentTypeRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	body := []byte(`{"data":{"id":"ct1"}}`)
	for name, ct := range map[string]string{"U+0001": "text/plain\x01", "U+0000": "text/\x00plain", "DEL": "text/plain\x7f",
		"CR": "text/plain;\rx=1", "ESC": "\x1b[31m"} {
		t.Run(name, func(t *testing.T) {
			a := h.rawPost(t, "open", []string{"Content-Type: " + ct}, body)
			if a.status != 400 || a.code() != "invalid_content_type" {
				t.Fatalf("got %d %q (%v), want 400 invalid_content_type", a.status, a.code(), a.body)
			}
		})
	}
	if n := h.count(t); n != 0 {
		t.Fatalf("refused requests stored %d events, want 0", n)
	}
	a := h.rawPost(t, "open", []string{"Content-Type: application/json;\tcharset=utf-8"}, body)
	if a.status != 200 {
		t.Fatalf("a Content-Type with a tab: got %d %v, want 200", a.status, a.body)
	}
}

// An ID that is not one exact text (invalid UTF-8, an unpaired surrogate)
// is refused, never merged with another ID that decodes the same way.
func TestEventIDNotExactRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	raw := func(id string) []byte { // id as written inside the JSON string
		return []byte(`{"id":"` + id + `","object":"event","type":"a"}`)
	}
	for name, body := range map[string][]byte{
		"col_\\xff":          raw("col_\xff"),
		"col_\\xfe":          raw("col_\xfe"),
		"raw surrogate":      raw("col_\xed\xa0\x80"),
		"\\ud800":            raw(`\ud800`),
		"\\udfff":            raw(`\udfff`),
		"reversed pair":      raw(`\udc00\ud800`),
		"high then not low":  raw(`\ud800\u0041`),
		"C1 control":         raw(`a\u0085b`),
		"truncated sequence": raw("col_\xc3"),
	} {
		t.Run(name, func(t *testing.T) {
			a := h.signedStripe(t, body)
			if a.status != 400 || a.code() != "invalid_event_id" {
				t.Fatalf("got %d %q (%v), want 400 invalid_event_id", a.status, a.code(), a.body)
			}
		})
	}
	// Header-sourced IDs too.
	for name, id := range map[string]string{"header \\xff": "t-\xff", "header surrogate": "t-\xed\xb0\x80"} {
		t.Run(name, func(t *testing.T) {
			body := []byte(`{"task":{"kind":"k"}}`)
			a := h.post(t, "tasks", body, hmacHeaders(hmacSecret, id, body))
			if a.status != 400 || a.code() != "invalid_event_id" {
				t.Fatalf("got %d %q (%v), want 400 invalid_event_id", a.status, a.code(), a.body)
			}
		})
	}
	if n := h.count(t); n != 0 {
		t.Fatalf("refused requests stored %d events, want 0", n)
	}
	// A real U+FFFD, written or escaped, and a valid pair are IDs like any.
	for _, tc := range []struct{ written, id string }{{"r\uFFFD", "r\uFFFD"}, {`e\ufffd`, "e\uFFFD"}, {`p\ud83d\ude00`, "p😀"}} {
		a := h.signedStripe(t, raw(tc.written))
		if a.status != 200 || a.body["status"] != "accepted" || a.body["event_id"] != tc.id {
			t.Fatalf("ID %q: got %d %v, want 200 accepted", tc.written, a.status, a.body)
		}
	}
}

// A number ID is its literal JSON text: 100 and 1e2 are two IDs, and the
// number 100 and the string "100" are one.
func TestEventIDNumberIsItsText(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	post := func(id string) answer {
		return h.signedStripe(t, []byte(`{"id":`+id+`,"type":"a"}`))
	}
	for _, tc := range []struct{ id, status, stored string }{
		{`100`, "accepted", "100"},
		{`1e2`, "accepted", "1e2"},
		{`"100"`, "duplicate", "100"},
		{`100.0`, "accepted", "100.0"},
		{`"1e2"`, "duplicate", "1e2"},
		{`-0`, "accepted", "-0"},
	} {
		a := post(tc.id)
		if a.status != 200 || a.body["status"] != tc.status || a.body["event_id"] != tc.stored {
			t.Fatalf("ID %s: got %d %v, want 200 %s as %q", tc.id, a.status, a.body, tc.status, tc.stored)
		}
	}
	if n := h.count(t); n != 4 {
		t.Fatalf("stored %d events, want 4 (100, 1e2, 100.0, -0)", n)
	}
}

// The kept headers are stored as JSON of at most maxKeptHeaders bytes: a
// User-Agent of 3,000 '<' (18,000 bytes escaped) is left out, the event
// is accepted with the headers that fit.
func TestKeptHeadersBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	body := []byte(`{"id":"evt_ua","object":"event","type":"invoice.paid"}`)
	headers := stripeHeader(body, stripeSecret, h.clock())
	headers["User-Agent"] = strings.Repeat("<", 3000)
	if a := h.post(t, "stripe", body, headers); a.status != 200 {
		t.Fatalf("answer %d %v, want 200", a.status, a.body)
	}
	ev, err := h.store.GetEvent(t.Context(), "stripe", "evt_ua")
	if err != nil {
		t.Fatal(err)
	}
	if len(ev.Headers) > maxKeptHeaders || strings.Contains(string(ev.Headers), "User-Agent") || !json.Valid(ev.Headers) {
		t.Fatalf("kept headers (%d bytes) %.200s: want valid JSON within %d bytes, without the User-Agent",
			len(ev.Headers), ev.Headers, maxKeptHeaders)
	}
}
