package expr

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"unicode/utf8"
)

// referenceParse is encoding/json's reading of a body, numbers kept as
// json.Number: the reference FuzzParseBody holds ParseBody to.
func referenceParse(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if len(bytes.TrimLeft(b[d.InputOffset():], " \t\r\n")) > 0 {
		return nil, errors.New("trailing data")
	}
	return v, nil
}

// sameValue compares ParseBody's value with encoding/json's. Strings
// compare after replacing invalid UTF-8 as encoding/json does (ParseBody
// keeps raw bytes; inexact marks such a body).
func sameValue(got, want any) bool {
	switch w := want.(type) {
	case nil:
		return got == nil
	case bool:
		g, ok := got.(bool)
		return ok && g == w
	case string:
		g, ok := got.(string)
		return ok && (g == w || !utf8.ValidString(g) && strings_ToValid(g) == w)
	case json.Number:
		switch g := got.(type) {
		case int64:
			i, err := strconv.ParseInt(string(w), 10, 64)
			return err == nil && i == g
		case uint64:
			u, err := strconv.ParseUint(string(w), 10, 64)
			return err == nil && u == g
		case float64:
			f, err := strconv.ParseFloat(string(w), 64)
			return f == g || err != nil && math.IsInf(g, 0) || math.IsNaN(f) && math.IsNaN(g)
		}
		return false
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !sameValue(g[i], w[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return false
		}
		// Keys that differ only in invalid UTF-8 are one key to
		// encoding/json (holding the last value); ParseBody keeps them
		// apart (and says inexact): those are compared by name only.
		seen := map[string]int{}
		for gk := range g {
			seen[strings_ToValid(gk)]++
		}
		if len(seen) != len(w) {
			return false
		}
		for k, wv := range w {
			if seen[k] > 1 {
				continue
			}
			gv, ok := g[k]
			if !ok {
				gv, ok = g[findRawKey(g, k)]
			}
			if !ok || !sameValue(gv, wv) {
				return false
			}
		}
		return true
	}
	return false
}

// strings_ToValid replaces each invalid byte with U+FFFD, as encoding/json does.
func strings_ToValid(s string) string {
	var b []byte
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = utf8.AppendRune(b, utf8.RuneError)
		} else {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return string(b)
}

// findRawKey finds the key of g that encoding/json reads as k.
func findRawKey(g map[string]any, k string) string {
	for gk := range g {
		if strings_ToValid(gk) == k {
			return gk
		}
	}
	return k
}
