package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Error is one configuration problem. Its message is
// "config: <path>: <problem>", where path is the key path such as
// "sources[0].secrets[1]" or "routes[2].headers.X-Team". Parse and Load
// return a single *Error or several joined with errors.Join; use errors.As
// to get the first.
type Error struct {
	Path string // key path; empty for problems with the document as a whole
	Msg  string // the problem, lowercase
}

func (e *Error) Error() string {
	if e.Path == "" {
		return "config: " + e.Msg
	}
	return "config: " + e.Path + ": " + e.Msg
}

// Load reads the YAML file at path and returns Parse(data, os.LookupEnv).
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(data, os.LookupEnv)
}

// Parse decodes a YAML configuration. In order it:
//
//  1. parses data into a yaml.Node tree (one document; an empty document is
//     an empty configuration);
//  2. walks the tree against Config's fields and yaml tags, refusing unknown
//     or duplicate keys and values of the wrong type (every error names the
//     key path, type errors also the line), and replaces ${NAME} in scalar
//     values with lookupEnv(NAME) (nil means os.LookupEnv);
//  3. decodes the tree, applies the defaults stated on Config's fields, and
//     validates the result.
//
// Environment references: ${NAME}, NAME matching [A-Za-z_][A-Za-z0-9_]*, is
// replaced by the variable's value; an unset variable is an error (a
// variable set to "" gives ""). "$${" is an escape for a literal "${"
// ("$${X}" gives "${X}"). Any other "$" is literal, so "pa$$word" and
// "cost: 5$" are kept as written. A "${" that does not form a valid
// reference is an error. Substitution happens on parsed scalar values, never
// on keys or on the raw text, so a value cannot change the YAML structure
// whatever it contains (quotes, ": ", newlines). For non-string fields
// (ports, durations, ...) the substituted value is read as a plain scalar,
// even if quoted, so `port: "${PORT}"` works; an empty result counts as
// unset and gets the default. YAML itself treats '{' and '}' as flow
// indicators inside [...] and {...}, so there a reference must be quoted:
// `secrets: ["${A}", "${B}"]` (block lists and `key: ${A}` need no quotes).
//
// A key that is absent or null gets its default. A key that is set keeps its
// value, which is then validated: `retries: 0` means no quick retries, while
// `timeout: 0s` is an error (must be positive).
//
// All problems found in a step are reported together, joined with
// errors.Join; each is an *Error.
func Parse(data []byte, lookupEnv func(string) (string, bool)) (*Config, error) {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if !errors.Is(err, io.EOF) {
			msg := err.Error()
			if bytes.Contains(data, []byte("${")) {
				msg += `; note: inside [...] or {...} quote a ${NAME} reference: ["${NAME}"]`
			}
			return nil, &Error{Msg: msg}
		}
		doc = yaml.Node{} // empty document
	}
	// Further documents are refused, except empty ones (a trailing "---").
	for {
		var extra yaml.Node
		err := dec.Decode(&extra)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, &Error{Msg: err.Error()}
		}
		if len(extra.Content) == 1 && extra.Content[0].ShortTag() == "!!null" && extra.Content[0].Value == "" {
			continue
		}
		return nil, &Error{Msg: fmt.Sprintf("line %d: more than one YAML document", extra.Line)}
	}

	w := &walker{
		lookupEnv: lookupEnv,
		set:       map[string]bool{},
		expanded:  map[*yaml.Node]bool{},
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	var cfg Config
	if root.Kind != 0 && root.ShortTag() != "!!null" {
		if root.Kind != yaml.MappingNode {
			return nil, &Error{Msg: fmt.Sprintf("line %d: the document must be a mapping of keys, got %s", root.Line, kindName(root))}
		}
		w.walk(root, reflect.TypeFor[Config](), "", 0)
		if len(w.errs) > 0 {
			return nil, errors.Join(w.errs...)
		}
		if err := root.Decode(&cfg); err != nil {
			// The walk checks every value, so this is not expected.
			return nil, &Error{Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
		}
	}
	cfg.applyDefaults(func(path string) bool { return w.set[path] })
	if err := cfg.validate(func(path string) bool { return w.set[path] }); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// Source returns the source with the given name.
func (c *Config) Source(name string) (*Source, bool) {
	for i := range c.Sources {
		if c.Sources[i].Name == name {
			return &c.Sources[i], true
		}
	}
	return nil, false
}

// maxWalk bounds the nodes visited, aliases included ("billion laughs").
const maxWalk = 250_000

// maxDepth bounds nesting, aliases included.
const maxDepth = 100

var durationType = reflect.TypeFor[time.Duration]()

// walker checks a node tree against a Go type and expands ${NAME}.
type walker struct {
	lookupEnv func(string) (string, bool)
	errs      []error
	// set holds the paths of keys present with a non-null value.
	set map[string]bool
	// expanded holds the scalars already expanded: an anchored node reached
	// again through an alias must not be expanded twice.
	expanded map[*yaml.Node]bool
	visits   int
	stopped  bool
}

func (w *walker) errorf(path string, format string, args ...any) {
	w.errs = append(w.errs, &Error{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// tick counts a visit to n; it reports false, once with an error, when
// the document is too large or too deep, aliases and merges included.
func (w *walker) tick(n *yaml.Node, path string, depth int) bool {
	if w.stopped {
		return false
	}
	if w.visits++; w.visits > maxWalk || depth > maxDepth {
		w.stopped = true
		w.errorf(path, "line %d: document too large or too deeply nested (aliases and merges included)", n.Line)
		return false
	}
	return true
}

// walk checks n against t at path. It reports whether n is non-null.
func (w *walker) walk(n *yaml.Node, t reflect.Type, path string, depth int) bool {
	if !w.tick(n, path, depth) {
		return false
	}
	if n = resolveAlias(n); n.Kind == yaml.AliasNode {
		w.errorf(path, "line %d: unresolved alias", n.Line)
		return false
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.ScalarNode && w.isScalarType(t) {
		return w.scalar(n, t, path)
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return false
	}
	switch t.Kind() {
	case reflect.Struct:
		return w.walkStruct(n, t, path, depth)
	case reflect.Map:
		return w.walkMap(n, t, path, depth)
	case reflect.Slice, reflect.Array:
		return w.walkList(n, t, path, depth)
	case reflect.Interface:
		// Anything goes; not used by Config.
		return true
	default:
		// A scalar type given a mapping or list.
		w.errorf(path, "line %d: expected %s, got %s", n.Line, typeName(t), kindName(n))
		return false
	}
}

// walkStruct checks mapping n against struct type t: each key a field.
func (w *walker) walkStruct(n *yaml.Node, t reflect.Type, path string, depth int) bool {
	if !w.expect(n, yaml.MappingNode, path) {
		return false
	}
	fields := yamlFields(t)
	for _, p := range w.pairs(n, path, depth) {
		kp := joinPath(path, p.key.Value)
		f, ok := fields[p.key.Value]
		if !ok {
			w.errorf(kp, "unknown key")
			continue
		}
		if w.walk(p.val, f.Type, kp, depth+1) {
			w.set[kp] = true
		}
	}
	return true
}

// walkMap checks mapping n against map type t (string keys).
func (w *walker) walkMap(n *yaml.Node, t reflect.Type, path string, depth int) bool {
	if !w.expect(n, yaml.MappingNode, path) {
		return false
	}
	if t.Key().Kind() != reflect.String {
		panic("config: unsupported map key type " + t.Key().String())
	}
	for _, p := range w.pairs(n, path, depth) {
		kp := joinPath(path, p.key.Value)
		if w.walk(p.val, t.Elem(), kp, depth+1) {
			w.set[kp] = true
		}
	}
	return true
}

// walkList checks sequence n against slice or array type t.
func (w *walker) walkList(n *yaml.Node, t reflect.Type, path string, depth int) bool {
	if !w.expect(n, yaml.SequenceNode, path) {
		return false
	}
	for i, item := range n.Content {
		ip := fmt.Sprintf("%s[%d]", path, i)
		// yaml.v3 drops null items, which would shift the indexes
		// of later ones; refuse them.
		if r := resolveAlias(item); r.Kind == yaml.ScalarNode && r.ShortTag() == "!!null" {
			w.errorf(ip, "line %d: empty list item", item.Line)
			continue
		}
		w.walk(item, t.Elem(), ip, depth+1)
	}
	return true
}

type pair struct{ key, val *yaml.Node }

// pairs returns the effective key/value pairs of mapping n: its own, then
// those merged in with "<<: *anchor" (or "<<: [*a, *b]") that it does not
// set itself, earlier merges winning over later ones as in YAML. A key
// repeated among n's own keys is an error; a key that is not a scalar too.
func (w *walker) pairs(n *yaml.Node, path string, depth int) []pair {
	if !w.tick(n, path, depth) {
		return nil
	}
	var out []pair
	var merges []*yaml.Node
	have := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		if key.Kind == yaml.ScalarNode && key.ShortTag() == "!!merge" {
			merges = append(merges, val)
			continue
		}
		if key.Kind != yaml.ScalarNode {
			w.errorf(path, "line %d: a key must be a plain value, got %s", key.Line, kindName(key))
			continue
		}
		if line, dup := have[key.Value]; dup {
			w.errorf(joinPath(path, key.Value), "line %d: duplicate key (first at line %d)", key.Line, line)
			continue
		}
		have[key.Value] = key.Line
		out = append(out, pair{key, val})
	}
	for _, m := range merges {
		m = resolveAlias(m)
		var parts []*yaml.Node
		switch {
		case m.Kind == yaml.SequenceNode:
			for _, p := range m.Content {
				parts = append(parts, resolveAlias(p))
			}
		case m.Kind == yaml.ScalarNode && m.ShortTag() == "!!null":
		default:
			parts = []*yaml.Node{m}
		}
		for _, part := range parts {
			if part.Kind != yaml.MappingNode {
				w.errorf(path, "line %d: a merge (<<) needs a mapping or a list of mappings", part.Line)
				continue
			}
			for _, p := range w.pairs(part, path, depth+1) {
				if _, ok := have[p.key.Value]; !ok {
					have[p.key.Value] = p.key.Line
					out = append(out, p)
				}
			}
		}
	}
	return out
}

func resolveAlias(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < maxDepth; i++ {
		n = n.Alias
	}
	return n
}

func (w *walker) expect(n *yaml.Node, kind yaml.Kind, path string) bool {
	if n.Kind == kind {
		return true
	}
	want := "a mapping"
	if kind == yaml.SequenceNode {
		want = "a list"
	}
	w.errorf(path, "line %d: expected %s, got %s", n.Line, want, kindName(n))
	return false
}

func (w *walker) isScalarType(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.String, reflect.Bool,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// scalar expands n and checks that it decodes into t. It reports whether
// n is non-null.
func (w *walker) scalar(n *yaml.Node, t reflect.Type, path string) bool {
	if !w.expanded[n] {
		w.expanded[n] = true
		v, changed, err := expand(n.Value, w.lookupEnv)
		if err != nil {
			w.errorf(path, "%s", err.Error())
			return false
		}
		if changed {
			n.Value = v
			if t.Kind() == reflect.String {
				n.Tag = "!!str"
			} else {
				// Read the result as a plain scalar: `port: "${PORT}"`
				// is a number, an empty result is null.
				n.Tag = ""
				n.Style &^= yaml.SingleQuotedStyle | yaml.DoubleQuotedStyle | yaml.LiteralStyle | yaml.FoldedStyle
			}
		}
	}
	if n.ShortTag() == "!!null" {
		return false
	}
	switch t.Kind() {
	case reflect.String:
		// yaml.v3 takes any scalar's text as a string, but decodes a
		// !!binary one from base64. The value is not quoted: it may be a
		// secret.
		if n.ShortTag() == "!!binary" && n.Decode(new(string)) != nil {
			w.errorf(path, "line %d: the !!binary value is not base64", n.Line)
			return false
		}
		return true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if t != durationType && n.ShortTag() == "!!float" {
			// yaml.v3 would truncate 2.5 to 2.
			w.errorf(path, "line %d: cannot use %q as %s", n.Line, n.Value, typeName(t))
			return false
		}
	}
	if err := n.Decode(reflect.New(t).Interface()); err != nil {
		hint := ""
		if t == durationType {
			hint = ` (a Go duration such as "15s", "5m" or "1h30m")`
			if tag := n.ShortTag(); tag == "!!int" || tag == "!!float" {
				hint = fmt.Sprintf(" (a duration needs a unit, e.g. %ss)", n.Value)
			}
		}
		w.errorf(path, "line %d: cannot use %q as %s%s", n.Line, n.Value, typeName(t), hint)
		return false
	}
	return true
}

// expand replaces ${NAME} in s; see Parse.
func expand(s string, lookupEnv func(string) (string, bool)) (string, bool, error) {
	if !strings.Contains(s, "$") {
		return s, false, nil
	}
	var b strings.Builder
	changed := false
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			b.WriteString("${")
			i += 3
			changed = true
		case strings.HasPrefix(s[i:], "${"):
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return "", false, errors.New(`unterminated "${" (write "$${" for a literal "${")`)
			}
			name := s[i+2 : i+2+end]
			if !validEnvName(name) {
				// The name is not echoed: the value may be a literal secret.
				return "", false, errors.New(`invalid environment variable reference: want ${NAME} with NAME of letters, digits and _ (write "$${" for a literal "${")`)
			}
			v, ok := lookupEnv(name)
			if !ok {
				return "", false, fmt.Errorf("environment variable %s is not set", name)
			}
			b.WriteString(v)
			i += 2 + end + 1
			changed = true
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String(), changed, nil
}

func validEnvName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_', 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// yamlFields maps the yaml key of each field of struct type t to the field.
func yamlFields(t reflect.Type) map[string]reflect.StructField {
	m := make(map[string]reflect.StructField, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") {
			panic("config: inline fields are not supported: " + f.Name)
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		m[name] = f
	}
	return m
}

// joinPath appends a key to a path: "a.b", or a["x y"] for keys that are
// not plain names.
func joinPath(path, key string) string {
	plain := key != ""
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c == '_' || c == '-' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			plain = false
			break
		}
	}
	if !plain {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "null"
		}
		// Not echoed: it may be a secret written where a list was expected.
		return "a single value"
	case yaml.AliasNode:
		return "an alias"
	}
	return "nothing"
}

func typeName(t reflect.Type) string {
	if t == durationType {
		return "a duration"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	}
	return t.String()
}
