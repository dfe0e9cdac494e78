package console

import (
	"database/sql"
	"strings"
	"testing"

	_ "github.com/mattn/go-sqlite3" // the store's SQLite, to check the paths
)

// FuzzSearchParams: the search form's JSON field and times, from anyone
// with a token. A field the form accepts is a path SQLite's json_extract
// takes (a malformed one would fail the search: 503), holds no quote that
// could end a name, and a time either parses or is a 400, never a panic.
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
	db, err := sql.Open("sqlite3", ":memory:")
	if err != nil {
		f.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	f.Cleanup(func() { db.Close() })
	// SQLite checks a path only against a document.
	stmt, err := db.Prepare(`SELECT CAST(json_extract('{"a":{"b":[1,2]},"items":[{"sku":"A-1"}]}', ?) AS TEXT) = ?`)
	if err != nil {
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
		var eq sql.NullBool
		if err := stmt.QueryRow(p, value).Scan(&eq); err != nil {
			t.Fatalf("field %q (path %q): %v", field, p, err)
		}
	})
}
