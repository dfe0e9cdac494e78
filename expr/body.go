package expr

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"
)

// ErrNotJSON is ParseBody's error for a body that is not one JSON value.
var ErrNotJSON = errors.New("body is not valid JSON")

// ParseBody parses a JSON body for Input.Body: objects, arrays, strings,
// bools and null as encoding/json decodes them; an integer that fits is
// an int (CEL int, or uint beyond int64), any other number a double, so
// that a numeric ID converts to its exact digits (string(body.id)).
// inexact reports that a string may have been changed in decoding: the
// body holds invalid UTF-8 or a \u escape of a surrogate, which
// encoding/json replaces with U+FFFD.
func ParseBody(b []byte) (v any, inexact bool, err error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return nil, false, ErrNotJSON
	}
	if len(bytes.TrimLeft(b[d.InputOffset():], " \t\r\n")) > 0 {
		return nil, false, ErrNotJSON // trailing data
	}
	return numbers(v), !utf8.Valid(b) || surrogateEscape(b), nil
}

// numbers replaces each json.Number in v.
func numbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return i
		}
		if u, err := strconv.ParseUint(string(x), 10, 64); err == nil {
			return u
		}
		f, _ := strconv.ParseFloat(string(x), 64) // ±Inf beyond float64's range
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
	}
	return v
}

// surrogateEscape reports whether b holds a \u escape of a surrogate
// (\uD800-\uDFFF), paired or not.
func surrogateEscape(b []byte) bool {
	for {
		i := bytes.Index(b, []byte(`\u`))
		if i < 0 || i+3 > len(b) {
			return false
		}
		if c := b[i+2]; (c == 'd' || c == 'D') && i+3 < len(b) {
			if c3 := b[i+3]; c3 >= '8' && c3 <= '9' || c3 >= 'a' && c3 <= 'f' || c3 >= 'A' && c3 <= 'F' {
				return true
			}
		}
		b = b[i+2:]
	}
}
