package tasks_test

import (
	"testing"
)

// A content_type net/http could not send is refused at submit, as header
// values are.
func TestTaskContentTypeControlRefused(t *testing.T) {
	h := start(t, "")
	for name, ct := range map[string]string{"U+0001": `text/plain\u0001`, "U+0000": `\u0000`, "DEL": "text/plain\x7f",
		"line break": `text/plain\nX-Evil: 1`} {
		t.Run(name, func(t *testing.T) {
			a := h.submit(t, "ct-"+name, `{"url":"http://public.test/","body":{},"content_type":"`+ct+`"}`)
			if a.status != 422 || a.code() != "invalid_task" {
				t.Fatalf("got %d %q (%s), want 422 invalid_task", a.status, a.code(), a.raw)
			}
		})
	}
	if a := h.submit(t, "ct-ok", `{"url":"http://public.test/","body":{},"content_type":"application/json;\tcharset=utf-8"}`); a.status != 202 {
		t.Fatalf("a content_type with a tab: got %d %s, want 202", a.status, a.raw)
	}
}
