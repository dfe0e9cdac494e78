package console

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

// indentedSize is never less than what json.Indent makes.
func TestIndentedSizeBounds(t *testing.T) {
	for _, b := range []string{
		`{}`, `[]`, `{"a":1}`, `[1,2,[3,[4,{}]]]`, `{"a":{"b":{"c":[1,2,3]}},"d":"x,y:{z}"}`,
		`{"s":"a \"quoted\" , : [ { string"}`, `  { "a" : [ 1 , 2 ] }  `, `"plain"`, `12`,
	} {
		var out bytes.Buffer
		if err := json.Indent(&out, []byte(b), "", indentBy); err != nil {
			t.Fatal(err)
		}
		if got := indentedSize([]byte(b), len(indentBy)); got < out.Len() {
			t.Errorf("indentedSize(%s) = %d, indented it is %d", b, got, out.Len())
		}
	}
}

// A body of many items nested thousands deep, which indented would take
// thousands of times its size, is shown as its text, without building
// that: a sender cannot make an operator's page take the gateway's
// memory.
func TestDeepBodyShownAsText(t *testing.T) {
	const depth = 2000
	body := `{"id":"x","a":` + strings.Repeat("[", depth) + strings.Repeat("0,", 30000) + "0" + strings.Repeat("]", depth) + "}"
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	shown, kind := prettyBody([]byte(body))
	runtime.ReadMemStats(&after)
	if kind != "text" || !strings.HasPrefix(shown, `{"id":"x"`) {
		t.Fatalf("shown as %s: %.40s, want the text", kind, shown)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Fatalf("showing a %d-byte body allocated %d bytes", len(body), alloc)
	}
	if _, kind := prettyBody([]byte(`{"id":"y","a":[[1,2],[3]]}`)); kind != "json" {
		t.Fatalf("a plain JSON body shown as %s, want indented", kind)
	}
}

// indentedSize bounds json.Indent on any valid JSON, whatever its strings
// hold.
func FuzzIndentedSize(f *testing.F) {
	for _, s := range []string{`{}`, `[1,[2,{"a":"b"}]]`, `{"s":"a \"q\" , : [ {"}`, `"\\"`, ` [ ] `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		var out bytes.Buffer
		if err := json.Indent(&out, b, "", indentBy); err != nil {
			return
		}
		if got := indentedSize(b, len(indentBy)); got < out.Len() {
			t.Fatalf("indentedSize(%q) = %d, indented it is %d", b, got, out.Len())
		}
	})
}
