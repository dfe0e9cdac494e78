package console

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/store"
)

// FuzzSearchParams: the search form's JSON field and times, from anyone
// with a token. A field the form accepts is a path SQLite takes (a
// malformed one would be a 503), holds no quote that could end a name, and
// a time either parses or is a 400, never a panic.
func FuzzSearchParams(f *testing.F) {
	for _, s := range [][3]string{
		{"data.object.id", "evt_1", "2024-05-01T12:00"},
		{"items[0].sku", "A-1", "2024-05-01T12:00:00Z"},
		{`a"b`, "", "yesterday"},
		{"a..b", "x", "2024-13-01T00:00"},
		{"a[99999]", "", "2024-05-01T12:00:00.123456789+02:00"},
		{"$.a", "1", ""},
	} {
		f.Add(s[0], s[1], s[2])
	}
	st, err := store.Open(context.Background(), store.Config{Path: filepath.Join(f.TempDir(), "s.db")},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Stop(context.Background()) })
	// SQLite checks a path only against a row.
	if _, err := st.Claim(context.Background(), &store.Event{Source: "s", ID: "e1", Type: "t",
		Body: []byte(`{"a":{"b":[1,2]},"items":[{"sku":"A-1"}]}`), ReceivedAt: time.Now()}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, field, value, since string) {
		if tm, err := parseTime("since", since); err == nil && since != "" && tm.IsZero() {
			t.Fatalf("since %q parsed to the zero time", since)
		}
		if !fieldPath.MatchString(field) {
			return
		}
		p := jsonPath(field)
		if strings.Count(p, `"`) != 2*(strings.Count(field, ".")+1) {
			t.Fatalf("field %q gave path %q with a stray quote", field, p)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, _, err := st.SearchEvents(ctx, store.EventSearch{FieldPath: p, FieldValue: value, Limit: 1}); err != nil {
			t.Fatalf("field %q (path %q): %v", field, p, err)
		}
	})
}
