package expr

import (
	"testing"
	"unicode/utf8"
)

// fuzzExprs are expressions as configs write them, over hostile bodies.
var fuzzExprs = []struct {
	src  string
	kind Kind
}{
	{`body.job.id + ":" + body.status`, Text},
	{`string(body.id)`, Text},
	{`body.data.object.id`, Text},
	{`!body.livemode`, Bool},
	{`body.items.exists(x, x.price > 100)`, Bool},
	{`body.items.all(a, body.items.all(b, a == b))`, Bool},
	{`body.name.matches("^[a-z]+(x+)+$")`, Bool},
	{`size(body) > 2 && body.keys.map(k, k + k).size() > 0`, Bool},
}

// FuzzEval: no body makes an evaluation panic or run unbounded, and a
// text result is what the body parsed to (valid UTF-8 unless the body
// was inexact).
func FuzzEval(f *testing.F) {
	for _, s := range []string{
		`{"job":{"id":"job_42"},"status":"completed"}`,
		`{"id":12345678901234567890}`,
		`{"livemode":true}`,
		`{"items":[{"price":1},{"price":1000}]}`,
		`{"name":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!"}`,
		`{"job":{"id":"\ud800"},"status":"x"}`,
		`[[[[[[[[[[]]]]]]]]]]`,
	} {
		f.Add([]byte(s))
	}
	progs := make([]*Program, len(fuzzExprs))
	for i, e := range fuzzExprs {
		p, err := Compile(e.src, e.kind, All)
		if err != nil {
			f.Fatal(e.src, err)
		}
		progs[i] = p
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		body, loss, err := ParseBody(b)
		if err != nil {
			return
		}
		in := &Input{Body: body, Source: "s", Type: "t"}
		for i, p := range progs {
			if fuzzExprs[i].kind == Bool {
				_, _ = p.Bool(in)
				continue
			}
			s, err := p.Text(in)
			if err == nil && !loss.Replaced && !utf8.ValidString(s) {
				t.Errorf("%s = %q: invalid UTF-8 from an exact body", fuzzExprs[i].src, s)
			}
		}
	})
}

// FuzzCompile: no expression text makes Compile panic.
func FuzzCompile(f *testing.F) {
	for _, e := range fuzzExprs {
		f.Add(e.src)
	}
	f.Add(`((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((1))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))`)
	f.Fuzz(func(_ *testing.T, src string) {
		for _, k := range []Kind{Text, Bool} {
			_, _ = Compile(src, k, All)
		}
	})
}

// FuzzParseBody: ParseBody (gjson) accepts exactly the bodies
// encoding/json accepts (within MaxDepth) and gives the same value,
// numbers compared as encoding/json's json.Number text says.
func FuzzParseBody(f *testing.F) {
	for _, s := range []string{
		`{"a":1,"b":[true,false,null,"x"],"c":{"d":1.5e3}}`,
		`{"id":12345678901234567890,"n":-9223372036854775808,"f":0.1}`,
		`{"a":1,"a":2}`,
		`{"s":"\u00e9\ud83d\ude00\n\"\\"}`,
		`{"bad":"\ud800"}`,
		"{\"raw\":\"\xff\"}",
		` [1, 2] `,
		`{"a":1} x`,
		`{"a":01}`,
		`"\u0000"`,
		`1e999`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, _, err := ParseBody(b)
		want, werr := referenceParse(b)
		if werr != nil {
			if err == nil && shallow(b) {
				t.Fatalf("ParseBody(%q) accepted what encoding/json refuses: %v", b, werr)
			}
			return
		}
		if !shallow(b) {
			return
		}
		if err != nil {
			t.Fatalf("ParseBody(%q) = %v, encoding/json accepts it", b, err)
		}
		if !sameValue(got, want) {
			t.Fatalf("ParseBody(%q) = %#v, encoding/json %#v", b, got, want)
		}
	})
}
