package inbound

import (
	"strings"
	"testing"
)

// Task-queue callbacks keyed by job and status: job_42 completed and
// job_42 failed are two events; a repeat of either is a duplicate.
func TestIDExprTaskCallbacks(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	send := func(body string) answer {
		b := []byte(body)
		hs := hmacHeaders(hmacSecret, "", b)
		delete(hs, "X-Task-Id")
		return h.post(t, "jobs", b, hs)
	}
	completed := `{"job":{"id":"job_42"},"status":"completed","result":{"ok":true}}`
	failed := `{"job":{"id":"job_42"},"status":"failed","error":"boom"}`
	for i, tc := range []struct {
		body, status, id, typ string
	}{
		{completed, "accepted", "job_42:completed", "job.completed"},
		{failed, "accepted", "job_42:failed", "job.failed"},
		{completed, "duplicate", "job_42:completed", "job.completed"},
		{failed, "duplicate", "job_42:failed", "job.failed"},
	} {
		a := send(tc.body)
		if a.status != 200 || a.body["status"] != tc.status || a.body["event_id"] != tc.id || a.body["event_type"] != tc.typ {
			t.Fatalf("callback %d: %d %v, want %s %s %s", i, a.status, a.body, tc.status, tc.id, tc.typ)
		}
	}
	if ev := h.stored(t, "jobs", "job_42:failed"); ev == nil || ev.Type != "job.failed" || !strings.Contains(string(ev.Body), "boom") {
		t.Fatalf("stored: %+v", ev)
	}
	if n := h.count(t); n != 2 {
		t.Errorf("%d events stored, want 2", n)
	}
}

// An expression over headers (lower-case names), source and the type.
func TestIDExprHeaders(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.post(t, "byheader", []byte(`not json at all`), map[string]string{"X-Queue": "q1", "X-TASK": "t9"})
	if a.status != 200 || a.body["event_id"] != "q1/t9/byheader.task" || a.body["event_type"] != "byheader.task" {
		t.Fatalf("%d %v", a.status, a.body)
	}
}

// An expression that fails (a missing field, a wrong type) or gives an ID
// today's checks refuse is a 400 that stores nothing.
func TestIDExprRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, tc := range []struct {
		name, body, code string
	}{
		{"missing field", `{"status":"completed"}`, "invalid_event_id"},
		{"missing type field", `{"job":{"id":"job_42"}}`, "invalid_event_type"},
		{"number plus string", `{"job":{"id":42},"status":"completed"}`, "invalid_event_id"},
		{"not json", `{"job":`, "malformed_json"},
		{"control character", `{"job":{"id":"job\n42"},"status":"completed"}`, "invalid_event_id"},
		{"lone surrogate", `{"job":{"id":"job\ud800"},"status":"completed"}`, "invalid_event_id"},
		{"too long", `{"job":{"id":"` + strings.Repeat("j", 250) + `"},"status":"completed"}`, "invalid_event_id"},
		{"type too long", `{"job":{"id":"j"},"status":"` + strings.Repeat("s", 252) + `"}`, "invalid_event_type"},
	} {
		b := []byte(tc.body)
		hs := hmacHeaders(hmacSecret, "", b)
		delete(hs, "X-Task-Id")
		a := h.post(t, "jobs", b, hs)
		if a.status != 400 || a.code() != tc.code {
			t.Errorf("%s: %d %v, want 400 %s", tc.name, a.status, a.body, tc.code)
		}
	}
	// A header an expression reads is absent: a map lookup that fails.
	if a := h.post(t, "byheader", []byte(`{}`), map[string]string{"X-Queue": "q1"}); a.status != 400 || a.code() != "invalid_event_id" {
		t.Errorf("missing header: %d %v", a.status, a.body)
	}
	if n := h.count(t); n != 0 {
		t.Errorf("%d events stored, want 0", n)
	}
}

// An id_expr giving a number's text is refused when the body writes the
// number with more digits than a double keeps: two such numbers give one
// text, and the second event would be answered duplicate. A number a
// double holds as written is one ID however written, and an ID that does
// not depend on a rounded number is taken.
func TestIDExprRoundedNumberRefused(t *testing.T) {
	t.Parallel()
	h := newHarnessFor(t, []Source{{Name: "q", Verify: "none", IDExpr: `string(body.id)`}}, Options{})
	for _, tc := range []struct {
		id, status, eventID string
	}{
		{`18446744073709551616`, "", ""},
		{`18446744073709551617`, "", ""},
		{`0.10000000000000001`, "", ""},
		{`0.1`, "accepted", "0.1"},
		{`100`, "accepted", "100"},
		{`1e2`, "duplicate", "100"},
		{`12345678901234567890`, "accepted", "12345678901234567890"},
		// A string ID beside rounded numbers it does not depend on.
		{`"inv_1.1","total":1.1000000000000001`, "accepted", "inv_1.1"},
		{`"evt_abc","prices":[` + strings.Repeat(`0.10000000000000001,`, 17) + `0]`, "accepted", "evt_abc"},
	} {
		a := h.post(t, "q", []byte(`{"id":`+tc.id+`}`), nil)
		switch {
		case tc.status == "" && (a.status != 400 || a.code() != "invalid_event_id"):
			t.Errorf("id %s: %d %v, want 400 invalid_event_id", tc.id, a.status, a.body)
		case tc.status != "" && (a.status != 200 || a.body["status"] != tc.status || a.body["event_id"] != tc.eventID):
			t.Errorf("id %s: %d %v, want %s %s", tc.id, a.status, a.body, tc.status, tc.eventID)
		}
	}
}
