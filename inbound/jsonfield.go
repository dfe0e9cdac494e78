package inbound

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"
)

// errMalformedJSON is returned when the body is not one valid JSON document.
var errMalformedJSON = errors.New("malformed json")

// maxJSONDepth is encoding/json's limit on the nesting of objects and
// arrays; bodies nested deeper are malformed, as there.
const maxJSONDepth = 10000

// lookupJSON checks that body is exactly one valid JSON document (RFC 8259,
// the same acceptance as encoding/json.Valid), and for each dot-separated
// path in paths (e.g. "id", "data.object.id") stores in out[i] the value
// found there: a string unescaped, a number as its literal text, true/false
// as their text; null, an object, an array, or an absent path give "". An
// empty path string gives "". len(out) == len(paths). Duplicate keys: the
// last one wins, like encoding/json. Keys are matched exactly
// (case-sensitive) after unescaping.
//
// Strings are unescaped exactly as encoding/json.Unmarshal does it: each byte
// of invalid UTF-8 and each unpaired surrogate escape becomes U+FFFD (such
// strings are valid JSON for encoding/json.Valid). Path segments are compared
// with keys decoded that way, so a key containing a dot is never matched.
// Arrays are not indexed: a path never descends into one. On error every
// out[i] is "".
//
// If inexact is not nil, inexact[i] tells whether out[i] is a string that
// held invalid UTF-8 or an unpaired surrogate escape: its U+FFFDs stand for
// text that was not there, so two different strings can give the same
// out[i]. lookupJSON panics if len(out) or a non-nil inexact's length is not
// len(paths).
//
// gjson validates and walks the document; strings and keys are decoded here
// because gjson keeps invalid UTF-8 and turns unpaired surrogates into
// U+FFFD without saying so.
func lookupJSON(body []byte, paths []string, out []string, inexact []bool) error {
	if len(out) != len(paths) || inexact != nil && len(inexact) != len(paths) {
		panic("inbound: lookupJSON: len(out) or len(inexact) != len(paths)")
	}
	clear(out)
	clear(inexact)
	if !validJSON(body) {
		return errMalformedJSON
	}
	var restBuf [jsonPathsOnStack]string
	var idxBuf [jsonPathsOnStack]int
	l := jsonLookup{rest: restBuf[:0], out: out, inexact: inexact}
	idx := idxBuf[:0]
	for i, p := range paths {
		l.rest = append(l.rest, p)
		if p != "" {
			idx = append(idx, i)
		}
	}
	// A view of body for gjson, which works on strings; nothing kept
	// points into it (every value stored in out is a copy).
	//nolint:gosec // G103: a read-only string view of body for gjson; every value kept is a copy
	if doc := gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body))); doc.IsObject() && len(idx) > 0 {
		l.object(doc, idx)
	}
	return nil
}

// jsonPathsOnStack is how many paths lookupJSON looks up without
// allocating.
const jsonPathsOnStack = 16

// jsonLookup is the state of one lookupJSON: rest[i] is what is left of
// paths[i] below the object being walked.
type jsonLookup struct {
	rest    []string
	out     []string
	inexact []bool
}

// object looks up the next segment of the paths idx in obj, in one walk
// over its members, stores the values of the paths that end there and
// walks on into the objects found for the others (once per object).
func (l *jsonLookup) object(obj gjson.Result, idx []int) {
	var foundBuf [jsonPathsOnStack]gjson.Result
	found := foundBuf[:0]
	if len(idx) > len(foundBuf) {
		found = make([]gjson.Result, 0, len(idx))
	}
	found = found[:len(idx)]
	obj.ForEach(func(k, v gjson.Result) bool {
		// Keys are compared as encoding/json decodes them; the last
		// match wins.
		raw := k.Raw[1 : len(k.Raw)-1]
		var decBuf [64]byte
		var dec []byte
		if strings.IndexByte(raw, '\\') >= 0 || !utf8.ValidString(raw) {
			dec, _ = jsonAppendUnquoted(decBuf[:0], raw)
		}
		for j, i := range idx {
			seg, _, _ := strings.Cut(l.rest[i], ".")
			if dec == nil && raw == seg || dec != nil && string(dec) == seg {
				found[j] = v
			}
		}
		return true
	})
	var doneBuf [jsonPathsOnStack]bool
	done := doneBuf[:0]
	if len(idx) > len(doneBuf) {
		done = make([]bool, 0, len(idx))
	}
	done = done[:len(idx)]
	for j, i := range idx {
		if !strings.Contains(l.rest[i], ".") {
			l.store(i, found[j])
			done[j] = true
		}
	}
	// Walk into each object found with every path that found it.
	var subBuf [jsonPathsOnStack]int
	for j := range idx {
		if done[j] || !found[j].IsObject() {
			continue
		}
		sub := subBuf[:0]
		for j2 := j; j2 < len(idx); j2++ {
			if !done[j2] && found[j2].IsObject() && found[j2].Index == found[j].Index {
				done[j2] = true
				i2 := idx[j2]
				_, l.rest[i2], _ = strings.Cut(l.rest[i2], ".")
				sub = append(sub, i2)
			}
		}
		l.object(found[j], sub)
	}
}

// store sets out[i] to the value v, if v is one that gives text.
func (l *jsonLookup) store(i int, v gjson.Result) {
	switch v.Type {
	case gjson.String:
		var exact bool
		l.out[i], exact = jsonUnquote(v.Raw[1 : len(v.Raw)-1])
		if l.inexact != nil {
			l.inexact[i] = !exact
		}
	case gjson.Number:
		l.out[i] = strings.Clone(v.Raw)
	case gjson.True:
		l.out[i] = "true"
	case gjson.False:
		l.out[i] = "false"
	}
}

// validJSON reports whether b is one JSON document that encoding/json.Valid
// accepts. gjson's validator recurses once per level of nesting and has no
// limit, so a body with enough brackets to be nested too deeply is left to
// encoding/json, which scans without recursion.
func validJSON(b []byte) bool {
	if bytes.Count(b, []byte("{"))+bytes.Count(b, []byte("[")) > maxJSONDepth {
		return json.Valid(b)
	}
	return gjson.ValidBytes(b)
}

// jsonHex4 decodes the 4 hex digits at the start of b, or returns -1.
func jsonHex4(b string) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// jsonUnquote returns the contents of a valid JSON string (raw, without its
// quotes) as a new Go string. exact is false if it held invalid UTF-8 or an
// unpaired surrogate escape (see jsonAppendUnquoted).
func jsonUnquote(raw string) (s string, exact bool) {
	if strings.IndexByte(raw, '\\') < 0 && utf8.ValidString(raw) {
		return strings.Clone(raw), true
	}
	var buf [128]byte
	b, exact := jsonAppendUnquoted(buf[:0], raw)
	return string(b), exact
}

// jsonAppendUnquoted appends to b the contents of the validated string raw
// (without its quotes) with escapes decoded, the way encoding/json does it:
// invalid UTF-8 bytes and unpaired surrogate escapes become U+FFFD, and
// exact is false if there was any.
func jsonAppendUnquoted(b []byte, raw string) (_ []byte, exact bool) {
	exact = true
	for r := 0; r < len(raw); {
		c := raw[r]
		switch {
		case c == '\\':
			switch raw[r+1] {
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				rr := jsonHex4(raw[r+2:])
				r += 6
				if utf16.IsSurrogate(rr) {
					// Only a high surrogate escape followed by a low one
					// makes a pair; encoding/json replaces anything else.
					if r+6 <= len(raw) && raw[r] == '\\' && raw[r+1] == 'u' {
						if dec := utf16.DecodeRune(rr, jsonHex4(raw[r+2:])); dec != utf8.RuneError {
							b = utf8.AppendRune(b, dec)
							r += 6
							continue
						}
					}
					rr, exact = utf8.RuneError, false
				}
				b = utf8.AppendRune(b, rr)
				continue
			default: // '"', '\\', '/'
				b = append(b, raw[r+1])
			}
			r += 2
		case c < utf8.RuneSelf:
			b = append(b, c)
			r++
		default:
			rr, size := utf8.DecodeRuneInString(raw[r:])
			if rr == utf8.RuneError && size == 1 {
				b = utf8.AppendRune(b, utf8.RuneError)
				exact = false
			} else {
				b = append(b, raw[r:r+size]...)
			}
			r += size
		}
	}
	return b, exact
}
