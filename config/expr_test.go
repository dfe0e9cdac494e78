package config

import (
	"fmt"
	"strings"
	"testing"
)

// Expressions are compiled when the config loads: an error names the key
// and the position in the expression; id_expr and type_expr exclude the
// header and field of the same.
func TestExpressionValidation(t *testing.T) {
	const route = "routes: [{name: r, sources: [jobs], url: 'http://x', filter: %s}]\n"
	for _, tc := range []struct {
		name, src, want string
	}{
		{"id_expr undeclared", "sources: [{name: jobs, verify: none, id_expr: 'body.job.id + \":\" + bdy.status'}]\n",
			"config: sources[0].id_expr: 1:21: undeclared reference to 'bdy' (did you mean 'body'?)"},
		{"id_expr syntax", "sources: [{name: jobs, verify: none, id_expr: 'body.job.id +'}]\n",
			"config: sources[0].id_expr: 1:14: Syntax error: …"},
		{"id_expr not a string", "sources: [{name: jobs, verify: none, id_expr: 'body.n + 1'}]\n",
			"config: sources[0].id_expr: 1:1: the result is int, want string"},
		{"id_expr with id_field", "sources: [{name: jobs, verify: none, id_field: id, id_expr: 'body.id'}]\n",
			"config: sources[0]: id_expr and id_header / id_field are mutually exclusive"},
		{"id_expr with id_header", "sources: [{name: jobs, verify: none, id_header: X-Id, id_expr: 'body.id'}]\n",
			"config: sources[0]: id_expr and id_header / id_field are mutually exclusive"},
		{"type_expr with type_field", "sources: [{name: jobs, verify: stripe, secrets: [s], type_field: t, type_expr: 'body.t'}]\n",
			"config: sources[0]: type_expr and type_header / type_field are mutually exclusive"},
		{"type_expr reads no type", "sources: [{name: jobs, verify: none, id_expr: 'body.id', type_expr: 'type + \"x\"'}]\n",
			"config: sources[0].type_expr: 1:6: found no matching overload…"},
		{"filter not a bool", "sources: [{name: jobs, verify: none, id_expr: 'body.id'}]\n" + fmt.Sprintf(route, "'body.n + 1'"),
			"config: routes[0].filter: 1:1: the result is int, want bool"},
		{"filter headers", "sources: [{name: jobs, verify: none, id_expr: 'body.id'}]\n" + fmt.Sprintf(route, `'headers["x"] == "y"'`),
			"config: routes[0].filter: headers are not available to a route filter (only body, source and type)"},
		{"filter syntax", "sources: [{name: jobs, verify: none, id_expr: 'body.id'}]\n" + fmt.Sprintf(route, "'!body.livemode &&'"),
			"config: routes[0].filter: 1:18: Syntax error: …"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := parseErr(t, tc.src, nil)
			if prefix, ok := strings.CutSuffix(tc.want, "…"); ok {
				wantErrorMatch(t, err, "^"+regexpQuote(prefix))
			} else {
				wantError(t, err, tc.want)
			}
		})
	}
}

// An id_expr replaces the scheme's default ID location, and satisfies
// verify: none's need for one.
func TestExpressionKeys(t *testing.T) {
	c := mustParse(t, `
sources:
  - {name: s, verify: stripe, secrets: [whsec_x], id_expr: 'body.data.object.id + ":" + type'}
  - {name: jobs, verify: none, id_expr: 'body.job.id + ":" + body.status', type_expr: '"job." + body.status'}
routes:
  - {name: live, sources: [s], url: 'https://example.com/', filter: '!has(body.livemode) || body.livemode'}
`, nil)
	s := c.Sources[0]
	if s.IDField != "" || s.IDHeader != "" || s.TypeField != "type" {
		t.Errorf("stripe source: id_field %q id_header %q type_field %q", s.IDField, s.IDHeader, s.TypeField)
	}
	if j := c.Sources[1]; j.IDExpr == "" || j.TypeExpr == "" || j.TypeField != "" {
		t.Errorf("jobs source: %+v", j)
	}
	if c.Routes[0].Filter == "" {
		t.Error("filter lost")
	}
}
