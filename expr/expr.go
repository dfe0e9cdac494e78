// Package expr compiles and evaluates the gateway's CEL expressions
// (cel.dev/cel-go): a source's id_expr and type_expr and a route's filter.
//
// One environment declares the variables every expression may read:
// body (the parsed JSON body, dyn), headers (the request's headers, by
// lower-case name), source (the source's name) and type (the event type).
// An expression is compiled and type-checked once, when the config loads;
// a compile error names its position (line:column). Evaluation is bounded:
// a cost limit stops an expression that a hostile body would make run
// long (e.g. a macro over a huge list), and a memory limit one that would
// build huge values.
package expr

import (
	"errors"
	"fmt"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/ext"
	"cel.dev/cel-go/interpreter"
)

// Vars is a set of the variables an expression may read.
type Vars uint8

// The variables.
const (
	Body Vars = 1 << iota
	Headers
	Source
	Type
	All = Body | Headers | Source | Type
)

// names of the variables, by bit.
var names = [...]struct {
	v    Vars
	name string
}{{Body, "body"}, {Headers, "headers"}, {Source, "source"}, {Type, "type"}}

// Kind is the result an expression must have.
type Kind uint8

// The kinds.
const (
	Text Kind = iota + 1 // a string: an event's ID or type
	Bool                 // a route filter
)

// Limits of an expression and its evaluation.
const (
	// MaxLen is the longest expression, in bytes.
	MaxLen = 4096
	// CostLimit bounds an evaluation's cost (cel-go's units, about one
	// per operation and per few bytes of a string scanned): far above any
	// expression over a few fields, far below a second of work.
	CostLimit = 1_000_000
	// MemoryLimit bounds the values an evaluation builds (cel-go's units,
	// elements counted).
	MemoryLimit = 1 << 20
)

// Program is a compiled expression, safe for concurrent use.
type Program struct {
	prg  cel.Program
	kind Kind
	uses Vars
}

// Compile compiles and type-checks src with the variables in vars
// declared. An error holds each problem as "line:column: message".
func Compile(src string, kind Kind, vars Vars) (*Program, error) {
	if strings.TrimSpace(src) == "" {
		return nil, errors.New("empty expression")
	}
	if len(src) > MaxLen {
		return nil, fmt.Errorf("longer than %d bytes", MaxLen)
	}
	env, err := newEnv(vars)
	if err != nil {
		return nil, fmt.Errorf("cel environment: %w", err)
	}
	ast, iss := env.Compile(src)
	if iss != nil && iss.Err() != nil {
		return nil, issuesError(iss)
	}
	want := cel.StringType
	if kind == Bool {
		want = cel.BoolType
	}
	if out := ast.OutputType(); !out.IsExactType(want) && !out.IsExactType(cel.DynType) {
		return nil, fmt.Errorf("1:1: the result is %s, want %s", out, want)
	}
	prg, err := env.Program(ast,
		cel.CostLimit(CostLimit),
		cel.MemoryLimit(MemoryLimit),
		cel.InterruptCheckFrequency(100),
		cel.EvalOptions(cel.OptOptimize),
	)
	if err != nil {
		return nil, fmt.Errorf("program: %w", err)
	}
	p := &Program{prg: prg, kind: kind}
	for _, r := range ast.NativeRep().ReferenceMap() {
		for _, n := range names {
			if r.Name == n.name {
				p.uses |= n.v
			}
		}
	}
	return p, nil
}

// newEnv is the environment with the variables in vars.
func newEnv(vars Vars) (*cel.Env, error) {
	opts := []cel.EnvOption{
		ext.Strings(),
		cel.CrossTypeNumericComparisons(true),
		cel.ParserRecursionLimit(64),
		cel.ParserExpressionSizeLimit(MaxLen),
	}
	for _, n := range names {
		if vars&n.v == 0 {
			continue
		}
		t := cel.StringType
		switch n.v {
		case Body:
			t = cel.DynType
		case Headers:
			t = cel.MapType(cel.StringType, cel.StringType)
		}
		opts = append(opts, cel.Variable(n.name, t))
	}
	return cel.NewEnv(opts...)
}

// issuesError is the compile errors as "line:column: message", one per line.
func issuesError(iss *cel.Issues) error {
	var b strings.Builder
	for i, e := range iss.Errors() {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%d:%d: %s", e.Location.Line(), e.Location.Column()+1, e.Message)
	}
	return errors.New(b.String())
}

// Uses reports whether the expression reads any of vars (e.g. Body: the
// body must be parsed for it).
func (p *Program) Uses(vars Vars) bool { return p.uses&vars != 0 }

// Input is what an evaluation reads. Body is ParseBody's result; a
// variable the expression does not use may be left unset.
type Input struct {
	Body    any
	Headers map[string]string
	Source  string
	Type    string
}

// ResolveName implements interpreter.Activation.
func (in *Input) ResolveName(name string) (any, bool) {
	switch name {
	case "body":
		return in.Body, true
	case "headers":
		if in.Headers == nil {
			return map[string]string{}, true
		}
		return in.Headers, true
	case "source":
		return in.Source, true
	case "type":
		return in.Type, true
	}
	return nil, false
}

// Parent implements interpreter.Activation.
func (in *Input) Parent() interpreter.Activation { return nil }

// Text evaluates a Text expression.
func (p *Program) Text(in *Input) (string, error) {
	v, err := p.eval(in)
	if err != nil {
		return "", err
	}
	s, ok := v.(types.String)
	if !ok {
		return "", fmt.Errorf("the result is %s, not a string", v.Type().TypeName())
	}
	return string(s), nil
}

// Bool evaluates a Bool expression.
func (p *Program) Bool(in *Input) (bool, error) {
	v, err := p.eval(in)
	if err != nil {
		return false, err
	}
	b, ok := v.(types.Bool)
	if !ok {
		return false, fmt.Errorf("the result is %s, not a bool", v.Type().TypeName())
	}
	return bool(b), nil
}

func (p *Program) eval(in *Input) (ref.Val, error) {
	v, _, err := p.prg.Eval(in)
	if err != nil {
		return nil, fmt.Errorf("evaluate: %w", err)
	}
	return v, nil
}
