package tasks

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"

	"github.com/hookgate/hookgate/store"
)

// FuzzParse feeds arbitrary bodies to the task request parser: it must
// not panic, and what it accepts must be a request hookgate can send: an
// absolute http(s) URL, a known method, valid headers none of which is
// hookgate's, a content type and an idempotency_key that are valid header
// values (the key 1-255 characters, no space at either end), stored as
// JSON that reads back the same.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"url":"https://example.com/hook","body":{"a":1}}`,
		`{"url":"http://example.com/","method":"put","headers":{"X-A":"b"},"body_base64":"aGVsbG8=","content_type":"text/plain"}`,
		`{"url":"https://example.com/","idempotency_key":"order-1234 charge"}`,
		`{"url":"https://example.com/","idempotency_key":" a"}`,
		`{"url":"https://example.com/","idempotency_key":"a\u0000b"}`,
		`{"url":"https://example.com/","idempotency_key":12}`,
		`{"url":"https://example.com/","headers":{"Idempotency-Key":"x"}}`,
		`{"url":"ftp://example.com/"}`,
		`{"url":"https://example.com/","body":1,"body_base64":"AA=="}`,
		`{"url":`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		tr, herr := parse(body)
		if herr != nil {
			if tr != nil {
				t.Fatalf("parse returned a request and an error %v", herr)
			}
			return
		}
		u, err := url.Parse(tr.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			t.Fatalf("accepted url %q", tr.URL)
		}
		if !methods[tr.Method] {
			t.Fatalf("accepted method %q", tr.Method)
		}
		for k, v := range tr.Headers {
			if !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidHeaderFieldValue(v) ||
				reserved[strings.ToLower(k)] || strings.HasPrefix(strings.ToLower(k), "x-hookgate-") {
				t.Fatalf("accepted header %q: %q", k, v)
			}
		}
		if !httpguts.ValidHeaderFieldValue(tr.ContentType) {
			t.Fatalf("accepted content type %q", tr.ContentType)
		}
		if k := tr.IdempotencyKey; k != "" && (len(k) > MaxKeyLen || !httpguts.ValidHeaderFieldValue(k) ||
			strings.TrimSpace(k) != k || strings.ContainsAny(k, "\t\r\n")) {
			t.Fatalf("accepted idempotency_key %q", k)
		}
		stored, err := json.Marshal(tr)
		if err != nil {
			t.Fatal(err)
		}
		var back store.TaskRequest
		if err := json.Unmarshal(stored, &back); err != nil || fingerprint(&back) != fingerprint(tr) {
			t.Fatalf("stored request does not read back: %s (%v)", stored, err)
		}
	})
}
