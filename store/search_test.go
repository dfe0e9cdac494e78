package store

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// SearchEvents: newest first, task events left out, a body that is not
// JSON never fails a field search, and a field search that hit the scan
// bound says so.
func TestSearchEvents(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "s.db"))
	ctx := context.Background()
	t0 := time.UnixMilli(1_700_000_000_000)
	claim := func(source, id, body string, at time.Time) {
		t.Helper()
		if _, err := s.Claim(ctx, &Event{Source: source, ID: id, Type: "t", Body: []byte(body), ReceivedAt: at}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		claim("a", fmt.Sprintf("e%d", i), fmt.Sprintf(`{"n":%d,"tag":"x%d"}`, i, i%2), t0.Add(time.Duration(i)*time.Second))
	}
	claim("a", "raw", "not json", t0.Add(20*time.Second))
	claim(TaskSource, "task1", `{"n":3}`, t0.Add(21*time.Second))

	evs, cut, err := s.SearchEvents(ctx, EventSearch{Limit: 3})
	if err != nil || cut || len(evs) != 3 || evs[0].EventID != "raw" || evs[1].EventID != "e9" {
		t.Fatalf("newest 3: %+v cut %v err %v", evs, cut, err)
	}
	evs, cut, err = s.SearchEvents(ctx, EventSearch{FieldPath: "$.n", FieldValue: "3"})
	if err != nil || cut || len(evs) != 1 || evs[0].EventID != "e3" {
		t.Fatalf("n = 3: %+v cut %v err %v", evs, cut, err)
	}
	evs, _, err = s.SearchEvents(ctx, EventSearch{FieldPath: "$.tag", FieldValue: "x1",
		Since: t0.Add(2 * time.Second), Until: t0.Add(6 * time.Second)})
	if err != nil || len(evs) != 2 || evs[0].EventID != "e5" || evs[1].EventID != "e3" {
		t.Fatalf("tag x1 in [2s, 6s): %+v err %v", evs, err)
	}
	// An ID: under the given source, or under each of Sources.
	for _, f := range []EventSearch{{EventID: "e4"}, {EventID: "e4", Sources: []string{"b", "a"}}, {EventID: "e4", Source: "a"}} {
		evs, _, err = s.SearchEvents(ctx, f)
		if err != nil || len(evs) != 1 || evs[0].EventID != "e4" {
			t.Fatalf("%+v: %+v err %v", f, evs, err)
		}
	}
	if evs, _, _ = s.SearchEvents(ctx, EventSearch{EventID: "e4", Source: "b", Sources: []string{"a"}}); len(evs) != 0 {
		t.Fatalf("e4 of b: %+v", evs)
	}
	if evs, _, _ = s.SearchEvents(ctx, EventSearch{EventID: "task1", Sources: []string{TaskSource}}); len(evs) != 0 {
		t.Fatalf("a task event found: %+v", evs)
	}
	// The 4 newest are raw, e9, e8, e7: e3 is beyond them.
	evs, cut, err = s.SearchEvents(ctx, EventSearch{FieldPath: "$.n", FieldValue: "3", ScanMax: 4})
	if err != nil || !cut || len(evs) != 0 {
		t.Fatalf("n = 3 in the newest 4: %+v cut %v err %v", evs, cut, err)
	}
	evs, cut, err = s.SearchEvents(ctx, EventSearch{FieldPath: "$.n", FieldValue: "8", ScanMax: 4})
	if err != nil || !cut || len(evs) != 1 {
		t.Fatalf("n = 8 in the newest 4: %+v cut %v err %v", evs, cut, err)
	}
}
