package inbound

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// jsonTestStripeEvent is a realistic ~1 KiB Stripe webhook event, pretty-printed
// the way Stripe sends it.
const jsonTestStripeEvent = `{
  "id": "evt_1PqR3sLkdIwHu7ixAbCdEf12",
  "object": "event",
  "api_version": "2024-06-20",
  "created": 1724841234,
  "data": {
    "object": {
      "id": "pi_3PqR3rLkdIwHu7ix0XyZ9876",
      "object": "payment_intent",
      "amount": 2000,
      "amount_capturable": 0,
      "amount_received": 2000,
      "capture_method": "automatic_async",
      "client_secret": "pi_3PqR3rLkdIwHu7ix0XyZ9876_secret_Wq0kz1Lr8TbYq3",
      "confirmation_method": "automatic",
      "created": 1724841230,
      "currency": "usd",
      "customer": "cus_QhKz8Yb2mN4pXa",
      "description": "Order #10045 \u2014 2 \u00d7 T-shirt",
      "latest_charge": "ch_3PqR3rLkdIwHu7ix0Ab1Cd2E",
      "livemode": false,
      "metadata": {
        "order_id": "10045",
        "source": "checkout"
      },
      "payment_method": "pm_1PqR3qLkdIwHu7ixQwErTy45",
      "payment_method_types": [
        "card",
        "link"
      ],
      "receipt_email": "jenny.rosen@example.com",
      "status": "succeeded"
    },
    "previous_attributes": null
  },
  "livemode": false,
  "pending_webhooks": 2,
  "request": {
    "id": "req_Yt6mNb2Qw8XcVz",
    "idempotency_key": "a1b2c3d4-e5f6-7890-abcd-ef1234567890"
  },
  "type": "payment_intent.succeeded"
}
`

// jsonTestGitHubPush is a trimmed GitHub push event (compact form).
const jsonTestGitHubPush = `{"ref":"refs/heads/main","before":"6113728f27ae82c7b1a177c8d03f9e96e0adf246","after":"0000000000000000000000000000000000000000","repository":{"id":1296269,"node_id":"MDEwOlJlcG9zaXRvcnkxMjk2MjY5","name":"Hello-World","full_name":"octocat/Hello-World","private":false,"owner":{"login":"octocat","id":1,"site_admin":false}},"pusher":{"name":"octocat","email":"octocat@github.com"},"sender":{"login":"octocat","id":1},"created":false,"deleted":true,"forced":false,"base_ref":null,"compare":"https://github.com/octocat/Hello-World/compare/6113728f27ae...000000000000","commits":[],"head_commit":null}`

func TestLookupJSON(t *testing.T) {
	t.Parallel()
	deepObj := func(n int, leaf string) string {
		return strings.Repeat(`{"a":`, n) + leaf + strings.Repeat(`}`, n)
	}
	deepPath := func(n int) string {
		return strings.TrimSuffix(strings.Repeat("a.", n), ".")
	}

	tests := []struct {
		name  string
		body  string
		paths []string
		want  []string // nil: expect errMalformedJSON
	}{
		{"stripe", jsonTestStripeEvent,
			[]string{"id", "type", "data.object.id", "data.object.amount", "data.object.livemode", "data.object.description", "data.previous_attributes", "data.object.metadata", "request.idempotency_key", "created", "missing", "data.missing.id"},
			[]string{"evt_1PqR3sLkdIwHu7ixAbCdEf12", "payment_intent.succeeded", "pi_3PqR3rLkdIwHu7ix0XyZ9876", "2000", "false", "Order #10045 — 2 × T-shirt", "", "", "a1b2c3d4-e5f6-7890-abcd-ef1234567890", "1724841234", "", ""}},
		{"github", jsonTestGitHubPush,
			[]string{"ref", "repository.full_name", "repository.owner.login", "repository.owner.id", "deleted", "head_commit", "commits", "base_ref.x"},
			[]string{"refs/heads/main", "octocat/Hello-World", "octocat", "1", "true", "", "", ""}},
		{"no paths", `{"a":1}`, nil, []string{}},
		{"empty path", `{"":"x","a":"y"}`, []string{"", "a"}, []string{"", "y"}},
		{"empty segment", `{"a":{"":{"b":"z"}}}`, []string{"a..b", ".", "a."}, []string{"z", "", ""}},
		{"dotted key is not a path", `{"a.b":1,"a":{"b":2}}`, []string{"a.b"}, []string{"2"}},
		{"case-sensitive", `{"ID":"upper","id":"lower"}`, []string{"id", "ID", "Id"}, []string{"lower", "upper", ""}},
		{"same path twice", `{"a":"x"}`, []string{"a", "a"}, []string{"x", "x"}},
		{"prefix key", `{"ab":1,"a":{"bc":2}}`, []string{"a", "a.b", "ab"}, []string{"", "", "1"}},

		// Escapes.
		{"escapes", `{"s":"q\"b\\s\/b\bf\fn\nr\rt\t"}`, []string{"s"}, []string{"q\"b\\s/b\bf\fn\nr\rt\t"}},
		{"unicode escapes", `{"s":"\u0041\u00e9\u20AC\ud83d\ude00\u0000"}`, []string{"s"}, []string{"Aé€😀\x00"}},
		{"raw utf-8", `{"s":"héllo wörld 😀"}`, []string{"s"}, []string{"héllo wörld 😀"}},
		{"lone high surrogate", `{"s":"a\ud800b"}`, []string{"s"}, []string{"a\uFFFDb"}},
		{"lone low surrogate", `{"s":"\udc00"}`, []string{"s"}, []string{"\uFFFD"}},
		{"high surrogate then escape", `{"s":"\ud800\u0041"}`, []string{"s"}, []string{"\uFFFDA"}},
		{"reversed surrogates", `{"s":"\ude00\ud83d"}`, []string{"s"}, []string{"\uFFFD\uFFFD"}},
		{"invalid utf-8", "{\"s\":\"a\xffb\xed\xa0\x80\"}", []string{"s"}, []string{"a\uFFFDb\uFFFD\uFFFD\uFFFD"}},
		{"distinct invalid bytes", "{\"a\":\"col_\xff\",\"b\":\"col_\xfe\",\"c\":\"col_\xc3\"}", []string{"a", "b", "c"}, []string{"col_\uFFFD", "col_\uFFFD", "col_\uFFFD"}},
		{"replacement character itself", `{"a":"\ufffd","b":"�","c":"\ud83d\ude00"}`, []string{"a", "b", "c"}, []string{"\uFFFD", "\uFFFD", "😀"}},
		{"inexact then replaced", "{\"a\":\"\xff\",\"a\":\"ok\",\"b\":\"ok\",\"b\":\"\\udfff\"}", []string{"a", "b"}, []string{"ok", "\uFFFD"}},
		{"escaped key", `{"d\u0061ta":{"\u0069d":"x"}}`, []string{"data.id"}, []string{"x"}},
		{"escaped dot in key", `{"a\u002eb":1}`, []string{"a.b"}, []string{""}},
		{"invalid utf-8 key", "{\"k\xff\":1}", []string{"k\uFFFD", "k\xff"}, []string{"1", ""}},
		{"long escaped value", `{"s":"` + strings.Repeat(`\u00e9`, 100) + `"}`, []string{"s"}, []string{strings.Repeat("é", 100)}},
		{"long escaped key", `{"` + strings.Repeat(`\u0062`, 100) + `":true}`, []string{strings.Repeat("b", 100)}, []string{"true"}},
		{"bad escape", `{"s":"\x"}`, []string{"s"}, nil},
		{"bad unicode escape", `{"s":"\u12G4"}`, []string{"s"}, nil},
		{"short unicode escape", `{"s":"\u12"}`, []string{"s"}, nil},
		{"single quote escape", `{"s":"\'"}`, []string{"s"}, nil},
		{"control char in string", "{\"s\":\"a\nb\"}", []string{"s"}, nil},
		{"unterminated string", `{"s":"abc`, []string{"s"}, nil},
		{"unterminated escape", `{"s":"abc\`, []string{"s"}, nil},

		// Numbers.
		{"numbers", `{"a":0,"b":-0,"c":12.50,"d":-1e10,"e":1E+2,"f":3.25e-7,"g":123456789012345678901234567890}`,
			[]string{"a", "b", "c", "d", "e", "f", "g"},
			[]string{"0", "-0", "12.50", "-1e10", "1E+2", "3.25e-7", "123456789012345678901234567890"}},
		{"top-level number", `42`, []string{"a"}, []string{""}},
		{"leading zero", `{"a":01}`, []string{"a"}, nil},
		{"plus sign", `{"a":+1}`, []string{"a"}, nil},
		{"bare minus", `{"a":-}`, []string{"a"}, nil},
		{"trailing dot", `{"a":1.}`, []string{"a"}, nil},
		{"leading dot", `{"a":.5}`, []string{"a"}, nil},
		{"empty exponent", `{"a":1e}`, []string{"a"}, nil},
		{"signed empty exponent", `{"a":1e+}`, []string{"a"}, nil},
		{"hex", `{"a":0x10}`, []string{"a"}, nil},
		{"NaN", `{"a":NaN}`, []string{"a"}, nil},

		// Literals.
		{"booleans and null", `{"t":true,"f":false,"n":null}`, []string{"t", "f", "n"}, []string{"true", "false", ""}},
		{"truncated literal", `{"t":tru}`, []string{"t"}, nil},
		{"literal with suffix", `{"t":truex}`, []string{"t"}, nil},
		{"capitalised literal", `{"t":True}`, []string{"t"}, nil},

		// Containers in the way.
		{"object value", `{"a":{"b":1}}`, []string{"a"}, []string{""}},
		{"array value", `{"a":[1,2]}`, []string{"a", "a.0", "a.b"}, []string{"", "", ""}},
		{"arrays not searched", `{"a":[{"b":1}],"c":[[{"d":2}]]}`, []string{"a.b", "b", "d", "c.d"}, []string{"", "", "", ""}},
		{"key inside array not at top", `[{"id":"x"}]`, []string{"id"}, []string{""}},
		{"scalar in the way", `{"a":"str","b":5}`, []string{"a.x", "b.y"}, []string{"", ""}},
		{"nested", `{"a":{"b":{"c":{"d":"deep"}},"x":1},"y":{"b":2}}`, []string{"a.b.c.d", "a.x", "y.b", "a.b.c"}, []string{"deep", "1", "2", ""}},
		{"siblings after nested match", `{"a":{"b":{"z":1},"c":2},"d":3}`, []string{"a.b.z", "a.c", "d"}, []string{"1", "2", "3"}},

		// Duplicates: the last one wins.
		{"duplicate scalar", `{"a":1,"a":2}`, []string{"a"}, []string{"2"}},
		{"duplicate to null", `{"a":"x","a":null}`, []string{"a"}, []string{""}},
		{"duplicate to object", `{"a":"x","a":{"b":1}}`, []string{"a", "a.b"}, []string{"", "1"}},
		{"duplicate object replaced", `{"a":{"b":1},"a":{"c":2}}`, []string{"a.b", "a.c"}, []string{"", "2"}},
		{"duplicate object to scalar", `{"a":{"b":1},"a":3}`, []string{"a.b", "a"}, []string{"", "3"}},
		{"duplicate inner", `{"a":{"b":1,"b":2}}`, []string{"a.b"}, []string{"2"}},
		{"duplicate via escape", `{"id":"first","\u0069d":"second"}`, []string{"id"}, []string{"second"}},

		// Whitespace and document framing.
		{"whitespace", " \t\r\n{ \"a\" \n:\t\"x\" , \"b\" : [ 1 , 2 ] } \r\n\t ", []string{"a"}, []string{"x"}},
		{"empty object", `{}`, []string{"a"}, []string{""}},
		{"empty array", `[]`, []string{"a"}, []string{""}},
		{"empty containers", `{"a":{},"b":[],"c":{ },"d":[ ]}`, []string{"a", "b", "c.x"}, []string{"", "", ""}},
		{"top-level string", `"id"`, []string{"id"}, []string{""}},
		{"empty body", ``, []string{"id"}, nil},
		{"only whitespace", " \n\t", []string{"id"}, nil},
		{"trailing garbage", `{"id":"x"}x`, []string{"id"}, nil},
		{"two documents", `{"id":"x"} {"id":"y"}`, []string{"id"}, nil},
		{"trailing comma object", `{"id":"x",}`, []string{"id"}, nil},
		{"trailing comma array", `{"a":[1,]}`, []string{"a"}, nil},
		{"missing colon", `{"id" "x"}`, []string{"id"}, nil},
		{"missing comma", `{"a":1 "b":2}`, []string{"a"}, nil},
		{"unquoted key", `{id:"x"}`, []string{"id"}, nil},
		{"single-quoted", `{'id':'x'}`, []string{"id"}, nil},
		{"unclosed object", `{"id":"x"`, []string{"id"}, nil},
		{"unclosed array", `[1,2`, nil, nil},
		{"mismatched brackets", `{"a":[1}`, []string{"a"}, nil},
		{"NUL after document", "{}\x00", nil, nil},
		{"BOM", "\xef\xbb\xbf{}", nil, nil},
		{"vertical tab whitespace", "\v{}", nil, nil},
		{"non-breaking space", "{\u00a0}", nil, nil},
		{"comment", `{} // x`, nil, nil},

		// Nesting depth: encoding/json's limit is 10000.
		{"deep arrays at limit", strings.Repeat("[", 10000) + strings.Repeat("]", 10000), []string{"a"}, []string{""}},
		{"deep arrays over limit", strings.Repeat("[", 10001) + strings.Repeat("]", 10001), []string{"a"}, nil},
		{"deep objects at limit", deepObj(10000, "1"), []string{deepPath(10000), deepPath(9999)}, []string{"1", ""}},
		{"deep objects over limit", deepObj(10001, "1"), []string{deepPath(10001)}, nil},
		{"deep objects not tracked", deepObj(10000, `"v"`), []string{"b"}, []string{""}},
		{"deep unterminated", strings.Repeat(`[{"a":`, 1<<20), []string{"a"}, nil},
		{"deep path", deepObj(200, `"leaf"`), []string{deepPath(200)}, []string{"leaf"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := make([]string, len(tt.paths))
			for i := range out {
				out[i] = "stale"
			}
			inexact := make([]bool, len(tt.paths))
			err := lookupJSON([]byte(tt.body), tt.paths, out, inexact)
			if valid := json.Valid([]byte(tt.body)); valid != (tt.want != nil) {
				t.Fatalf("test case disagrees with json.Valid (%v)", valid)
			}
			if tt.want == nil {
				if !errors.Is(err, errMalformedJSON) {
					t.Fatalf("err = %v, want errMalformedJSON", err)
				}
				for i, v := range out {
					if v != "" {
						t.Errorf("out[%d] = %q after error, want \"\"", i, v)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v, want nil", err)
			}
			if !slices.Equal(out, tt.want) {
				t.Errorf("out = %q\nwant  %q", out, tt.want)
			}
			// The table entries must agree with encoding/json too.
			if len(tt.body) < 5000 {
				for i, p := range tt.paths {
					if want := jsonReferenceLookup(t, []byte(tt.body), p); want != tt.want[i] {
						t.Errorf("path %q: table says %q, encoding/json says %q", p, tt.want[i], want)
					}
					if want := jsonReferenceInexact([]byte(tt.body), p); inexact[i] != want {
						t.Errorf("path %q: inexact = %v, want %v", p, inexact[i], want)
					}
				}
			}
		})
	}
}

func TestLookupJSONLengthMismatch(t *testing.T) {
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Error("no panic for len(out) != len(paths)")
		}
	}()
	lookupJSON([]byte(`{}`), []string{"a"}, nil, nil)
}

func TestLookupJSONManyPaths(t *testing.T) {
	t.Parallel()
	// More paths than fit in lookupJSON's stack buffer.
	var body strings.Builder
	var paths, want []string
	body.WriteString(`{"n":{`)
	for i := range 40 {
		k := "k" + strconv.Itoa(i)
		if i > 0 {
			body.WriteString(",")
		}
		body.WriteString(`"` + k + `":"v` + k + `"`)
		paths = append(paths, "n."+k, k)
		want = append(want, "v"+k, "")
	}
	body.WriteString(`}}`)
	out := make([]string, len(paths))
	if err := lookupJSON([]byte(body.String()), paths, out, nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out, want) {
		t.Errorf("out = %q\nwant  %q", out, want)
	}
}

// TestLookupJSONAllocs is not parallel: AllocsPerRun counts every
// goroutine's allocations.
func TestLookupJSONAllocs(t *testing.T) {
	body := []byte(jsonTestStripeEvent)
	paths := []string{"id", "type"}
	out := make([]string, len(paths))
	allocs := testing.AllocsPerRun(100, func() {
		if err := lookupJSON(body, paths, out, nil); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 2 {
		t.Errorf("%v allocations per call, want <= 2 (the returned strings)", allocs)
	}
	// Absent paths, booleans and nulls allocate nothing, along objects
	// without escaped strings (gjson unescapes each member it walks past).
	paths = []string{"missing", "data.nope", "livemode", "data.previous_attributes"}
	out = make([]string, len(paths))
	allocs = testing.AllocsPerRun(100, func() {
		if err := lookupJSON(body, paths, out, nil); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per call, want 0", allocs)
	}
}

// jsonReferenceLookup is the behaviour lookupJSON must reproduce, written with
// encoding/json: decode into any (UseNumber) and walk the dot-separated path
// through the maps.
func jsonReferenceLookup(t testing.TB, body []byte, path string) string {
	t.Helper()
	v, err := jsonDecodeReference(body)
	if err != nil {
		t.Fatalf("decoding valid JSON: %v", err)
	}
	return jsonWalkReference(v, path)
}

func jsonDecodeReference(body []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

func jsonWalkReference(v any, path string) string {
	if path == "" {
		return ""
	}
	for seg := range strings.SplitSeq(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		if v, ok = m[seg]; !ok {
			return ""
		}
	}
	switch v := v.(type) {
	case string:
		return v
	case json.Number:
		return string(v)
	case bool:
		if v {
			return "true"
		}
		return "false"
	}
	return ""
}

// jsonReferenceInexact tells whether the value at path is a string that
// holds invalid UTF-8 or an unpaired surrogate escape, found with
// encoding/json's raw values and a check of the string's text written here
// on its own.
func jsonReferenceInexact(body []byte, path string) bool {
	if path == "" {
		return false
	}
	raw := json.RawMessage(body)
	for seg := range strings.SplitSeq(path, ".") {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil {
			return false
		}
		var ok bool
		if raw, ok = m[seg]; !ok {
			return false
		}
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) < 2 || raw[0] != '"' {
		return false
	}
	s := raw[1 : len(raw)-1]
	if !utf8.Valid(s) {
		return true
	}
	hex4 := func(b []byte) int {
		n, err := strconv.ParseUint(string(b[:4]), 16, 16)
		if err != nil {
			panic(err) // valid JSON
		}
		return int(n)
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			continue
		}
		i++
		if s[i] != 'u' {
			continue
		}
		r := hex4(s[i+1:])
		i += 4
		switch {
		case 0xDC00 <= r && r <= 0xDFFF:
			return true
		case 0xD800 <= r && r <= 0xDBFF:
			if i+7 > len(s) || s[i+1] != '\\' || s[i+2] != 'u' {
				return true
			}
			if lo := hex4(s[i+3:]); lo < 0xDC00 || lo > 0xDFFF {
				return true
			}
			i += 6
		}
	}
	return false
}

// jsonCollectPaths appends to paths the dot-joined key paths of v's objects, in
// sorted order, up to limit paths in all.
func jsonCollectPaths(paths []string, prefix string, v any, limit int) []string {
	m, ok := v.(map[string]any)
	if !ok {
		return paths
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if len(paths) >= limit {
			break
		}
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		paths = append(paths, p)
		paths = jsonCollectPaths(paths, p, m[k], limit)
	}
	return paths
}

// FuzzLookupJSON checks lookupJSON against encoding/json: the body must be
// accepted iff json.Valid accepts it, and every path must give what walking
// the json.Unmarshal'ed (UseNumber) value gives. The paths are the
// comma-separated ones from the fuzzer plus the key paths present in the
// document, so that matching is exercised on every valid input.
//
// Invalid UTF-8: json.Valid accepts it inside strings, and json.Unmarshal
// replaces each bad byte (and each unpaired surrogate escape) with U+FFFD;
// lookupJSON mirrors that replacement, so the comparison is exact on all
// inputs, valid UTF-8 or not.
func FuzzLookupJSON(f *testing.F) {
	for _, seed := range []struct{ body, paths string }{
		{jsonTestStripeEvent, "id,type,data.object.id,data.object.amount"},
		{jsonTestGitHubPush, "ref,repository.owner.login,deleted"},
		{`{"type":"invoice.paid","data":{"object":{"id":"in_1","total":-1.5e3,"paid":true}}}`, "type,data.object.total"},
		{`{"a":1,"a":{"b":2},"a":{"c":null}}`, "a,a.b,a.c"},
		{`{"s":"\ud83d\ude00\ud800\u0041\udc00","k\u0065y":"\"\\\/\b\f\n\r\t"}`, "s,key"},
		{"{\"s\":\"\xff\xed\xa0\x80\xf0\x9f\x98\",\"\xc3\":1}", "s,\xc3"},
		{"{\"id\":\"col_\xff\",\"type\":\"a\\ud800\",\"x\":\"\\udfff\\ud83d\\ude00\\ufffd\"}", "id,type,x"},
		{`{"id":100,"n":"100","e":1e2}`, "id,n,e"},
		{`[{"id":1},[],{}]`, "id"},
		{` {"a" : [ 1 , { "b" : true } ] , "c" : { } } `, "a.b,c"},
		{`{"a":{"":{"":"e"}}}`, "a..,a.,."},
		{`{"n":[0,-0,1.5,2e9,-3E-2,01]}`, "n"},
		{`{"id":"x"} trailing`, "id"},
		{`{"id":"x",}`, "id"},
		{`{"s":"\u00zz"}`, "s"},
		{`[[[[[[[[[[]]]]]]]]]]`, ""},
		{``, "id"},
		{`nul`, ""},
		{`"just a string"`, ""},
		{`-0.0e+0`, ""},
	} {
		f.Add([]byte(seed.body), seed.paths)
	}
	f.Fuzz(func(t *testing.T, body []byte, pathList string) {
		paths := strings.Split(pathList, ",")
		if len(paths) > 16 {
			paths = paths[:16]
		}
		valid := json.Valid(body)
		var v any
		if valid {
			var err error
			if v, err = jsonDecodeReference(body); err != nil {
				t.Fatalf("json.Valid but Decode fails: %v", err)
			}
			paths = jsonCollectPaths(paths, "", v, len(paths)+32)
		}
		out := make([]string, len(paths))
		inexact := make([]bool, len(paths))
		err := lookupJSON(body, paths, out, inexact)
		if (err == nil) != valid {
			t.Fatalf("lookupJSON(%q) err = %v, json.Valid = %v", body, err, valid)
		}
		if err != nil {
			if !errors.Is(err, errMalformedJSON) {
				t.Fatalf("err = %v, want errMalformedJSON", err)
			}
			return
		}
		for i, p := range paths {
			if want := jsonWalkReference(v, p); out[i] != want {
				t.Errorf("lookupJSON(%q) path %q = %q, encoding/json gives %q", body, p, out[i], want)
			}
			if want := jsonReferenceInexact(body, p); inexact[i] != want {
				t.Errorf("lookupJSON(%q) path %q: inexact = %v, want %v", body, p, inexact[i], want)
			}
		}
	})
}

func BenchmarkLookupJSON(b *testing.B) {
	body := []byte(jsonTestStripeEvent)
	paths := []string{"id", "type"}
	out := make([]string, len(paths))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := lookupJSON(body, paths, out, nil); err != nil {
			b.Fatal(err)
		}
	}
	if out[0] != "evt_1PqR3sLkdIwHu7ixAbCdEf12" || out[1] != "payment_intent.succeeded" {
		b.Fatalf("out = %q", out)
	}
}
