package expr

import (
	"fmt"
	"strings"
	"testing"
)

func TestCompileErrors(t *testing.T) {
	for _, tc := range []struct {
		src  string
		kind Kind
		vars Vars
		want string
	}{
		{`body.job.id + ":" + bdy.status`, Text, All, "1:21: undeclared reference to 'bdy'"},
		{`body.a +`, Text, All, "1:9: Syntax error"},
		{"body.a ==\n  1 +", Bool, All, "2:6: Syntax error"},
		{`headers["x"] == "1"`, Bool, Body | Source | Type, "1:1: undeclared reference to 'headers'"},
		{`type + "x"`, Text, Body | Headers | Source, "1:6: found no matching overload"}, // type is then CEL's own
		{`source == "a"`, Text, All, "the result is bool, want string"},
		{`source`, Bool, All, "the result is string, want bool"},
		{`1 + 2`, Text, All, "the result is int, want string"},
		{``, Text, All, "empty expression"},
		{strings.Repeat("a", MaxLen+1), Text, All, "longer than"},
	} {
		_, err := Compile(tc.src, tc.kind, tc.vars)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Compile(%q) = %v, want an error with %q", tc.src, err, tc.want)
		}
	}
}

func TestEval(t *testing.T) {
	body, loss, err := ParseBody([]byte(`{"job":{"id":"job_42","n":12345678901234567890},"status":"completed","livemode":false,"amount":1500,"ratio":0.5}`))
	if err != nil || loss.Replaced || loss.Rounded != 0 {
		t.Fatal(err, loss)
	}
	in := &Input{Body: body, Headers: map[string]string{"x-queue": "q1"}, Source: "jobs", Type: "job.done"}
	for _, tc := range []struct {
		src  string
		want string
	}{
		{`body.job.id + ":" + body.status`, "job_42:completed"},
		{`string(body.job.n)`, "12345678901234567890"},
		{`headers["x-queue"] + "/" + source + "/" + type`, "q1/jobs/job.done"},
		{`body.status.upperAscii()`, "COMPLETED"},
	} {
		p, err := Compile(tc.src, Text, All)
		if err != nil {
			t.Fatal(tc.src, err)
		}
		if got, err := p.Text(in); err != nil || got != tc.want {
			t.Errorf("%s = %q, %v; want %q", tc.src, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		src  string
		want bool
	}{
		{`!body.livemode`, true},
		{`body.amount > 1000 && body.ratio < 1`, true},
		{`body.amount == 1500.0`, true},
		{`has(body.customer) && body.customer == "c"`, false},
		{`type.startsWith("job.")`, true},
	} {
		p, err := Compile(tc.src, Bool, All)
		if err != nil {
			t.Fatal(tc.src, err)
		}
		if got, err := p.Bool(in); err != nil || got != tc.want {
			t.Errorf("%s = %v, %v; want %v", tc.src, got, err, tc.want)
		}
	}
	// A missing field, or a dyn of the wrong type, is an error.
	for _, src := range []string{`body.job.missing`, `body.job.n`, `body.status + 1`} {
		p, err := Compile(src, Text, All)
		if err != nil {
			continue // caught when checked
		}
		if got, err := p.Text(in); err == nil {
			t.Errorf("%s = %q, want an error", src, got)
		}
	}
}

func TestUses(t *testing.T) {
	p, err := Compile(`source + type`, Text, All)
	if err != nil {
		t.Fatal(err)
	}
	if p.Uses(Body) || p.Uses(Headers) || !p.Uses(Source|Type) {
		t.Errorf("uses %b", p.uses)
	}
	p, err = Compile(`body.a == headers.b`, Bool, All)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Uses(Body) || !p.Uses(Headers) || p.Uses(Source) {
		t.Errorf("uses %b", p.uses)
	}
}

func TestParseBody(t *testing.T) {
	for _, tc := range []struct {
		body        string
		ok, inexact bool
	}{
		{`{"a":1}`, true, false},
		{` [1,2] `, true, false},
		{`{"a":1} x`, false, false},
		{`{"a":1}{}`, false, false},
		{`{"a":`, false, false},
		{``, false, false},
		{`{"a":"\ud800"}`, true, true},
		{"{\"a\":\"\xff\"}", true, true},
		{`{"a":"\u00e9"}`, true, false},
	} {
		_, loss, err := ParseBody([]byte(tc.body))
		if (err == nil) != tc.ok || (err == nil && loss.Replaced != tc.inexact) {
			t.Errorf("ParseBody(%q) = replaced %v, %v", tc.body, loss.Replaced, err)
		}
	}
}

// A number written with more digits than a double keeps is counted; one
// a double holds as written is not, however written (1e2, 100.0, 0.1).
// ParseBodyNudged moves each counted one to the next double.
func TestParseBodyRounded(t *testing.T) {
	for _, tc := range []struct {
		body   string
		want   int
		nudged string // the body's value a, nudged, as string() gives it
	}{
		{`{"a":0.5,"b":1e2,"c":100.0,"d":0.1,"e":-2.5E-3,"f":0,"g":-0.0}`, 0, "0.5"},
		{`{"a":18446744073709551616}`, 1, "1.8446744073709556e+19"},
		{`{"a":0.10000000000000001}`, 1, "0.10000000000000002"},
		{`{"a":1e999,"b":-1e400000000000}`, 2, "1.7976931348623157e+308"},
		{`{"a":2.00000000000000000001,"b":[123456789012345678901234567890.5]}`, 2, "2.0000000000000004"},
	} {
		_, loss, err := ParseBody([]byte(tc.body))
		if err != nil || loss.Rounded != tc.want {
			t.Errorf("ParseBody(%s): rounded %d, %v; want %d", tc.body, loss.Rounded, err, tc.want)
		}
		v, err := ParseBodyNudged([]byte(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprintf("%g", v.(map[string]any)["a"]); got != tc.nudged {
			t.Errorf("ParseBodyNudged(%s): a = %s, want %s", tc.body, got, tc.nudged)
		}
	}
}

// TestCostBounded: a body built to make an expression run long (a huge
// list under a nested macro, a long string) is stopped by the cost
// limit, not run to its end.
func TestCostBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"items":[`)
	for i := range 20000 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"`)
	}
	b.WriteString(`]}`)
	body, _, err := ParseBody([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{
		`body.items.exists(x, body.items.exists(y, x + y == "never"))`,
		`body.items.map(x, x + x + x + x).size() == 0`,
	} {
		p, err := Compile(src, Bool, All)
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Bool(&Input{Body: body})
		if err == nil || !strings.Contains(err.Error(), "limit") {
			t.Errorf("%s: %v, want a limit exceeded", src, err)
		}
	}
}

// benchBody is a Stripe-shaped event of about 1 KiB, as cmd/bench sends.
var benchBody = []byte(`{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","api_version":"2024-06-20","created":1700000000,"type":"invoice.paid","livemode":false,"pending_webhooks":1,"request":{"id":null,"idempotency_key":null},"data":{"object":{"id":"in_1NG8Du2eZvKYlo2C","object":"invoice","currency":"usd","amount_due":4200,"customer":"cus_NG8Du2eZvKYlo2","description":"Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor. Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor. Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor. Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor. Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor. Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor. Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor. Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor. Lorem ipsum dolor sit amet."}}}`)

func BenchmarkParseBody(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := ParseBody(benchBody); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkIDExpr(b *testing.B) {
	p, err := Compile(`body.id + ":" + body.type`, Text, All)
	if err != nil {
		b.Fatal(err)
	}
	body, _, _ := ParseBody(benchBody)
	in := &Input{Body: body}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Text(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFilter(b *testing.B) {
	p, err := Compile(`!body.livemode`, Bool, All)
	if err != nil {
		b.Fatal(err)
	}
	body, _, _ := ParseBody(benchBody)
	in := &Input{Body: body}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Bool(in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseBodyEncodingJSON is encoding/json's decoding of the same
// body, for comparison with BenchmarkParseBody.
func BenchmarkParseBodyEncodingJSON(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := referenceParse(benchBody); err != nil {
			b.Fatal(err)
		}
	}
}

// A body nested deeper than MaxDepth is refused before it is walked.
func TestParseBodyDepth(t *testing.T) {
	ok := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	if _, _, err := ParseBody([]byte(ok)); err != nil {
		t.Errorf("depth %d: %v", MaxDepth, err)
	}
	deep := strings.Repeat("[", 500000) + strings.Repeat("]", 500000)
	if _, _, err := ParseBody([]byte(deep)); err == nil {
		t.Error("depth 500,000 accepted")
	}
	if _, _, err := ParseBody([]byte(`{"s":"[[[[\"]]]]"}`)); err != nil {
		t.Errorf("brackets in a string: %v", err)
	}
}
