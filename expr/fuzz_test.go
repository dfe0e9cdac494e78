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
		body, inexact, err := ParseBody(b)
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
			if err == nil && !inexact && !utf8.ValidString(s) {
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
