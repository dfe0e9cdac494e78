package inbound

import (
	"encoding/binary"
	"errors"
	"math/bits"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// errMalformedJSON is returned when the body is not one valid JSON document.
var errMalformedJSON = errors.New("malformed json")

// maxJSONDepth is the deepest nesting of objects and arrays lookupJSON
// accepts. It is encoding/json's limit, so both agree on which bodies are
// valid, and it bounds the scanner's recursion.
const maxJSONDepth = 10000

// jsonPathsOnStack is how many paths lookupJSON tracks without allocating.
const jsonPathsOnStack = 16

// lookupJSON scans body once, validating that it is exactly one valid JSON
// document (RFC 8259, same acceptance as encoding/json.Valid), and for each
// dot-separated path in paths (e.g. "id", "data.object.id") stores in out[i]
// the value found there: a string is unescaped (\uXXXX incl. surrogate pairs,
// invalid escapes → malformed), a number is its literal text, true/false their
// text; null, an object, an array, or an absent path give "". An empty path
// string gives "". len(out) == len(paths). Duplicate keys: the last one wins,
// like encoding/json. Keys are matched exactly (case-sensitive) after
// unescaping.
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
func lookupJSON(body []byte, paths []string, out []string, inexact []bool) error {
	if len(out) != len(paths) || inexact != nil && len(inexact) != len(paths) {
		panic("inbound: lookupJSON: len(out) or len(inexact) != len(paths)")
	}
	clear(inexact)
	var stBuf [jsonPathsOnStack]jsonPathState
	var st []jsonPathState
	if len(paths) <= len(stBuf) {
		st = stBuf[:len(paths)]
	} else {
		st = make([]jsonPathState, len(paths))
	}
	active := 0
	for k, p := range paths {
		out[k] = ""
		if p == "" {
			st[k].level = -1 // never matches
		} else {
			st[k].end = jsonSegmentEnd(p, 0)
			active++
		}
	}

	i := jsonSkipWS(body, 0)
	if active > 0 && i < len(body) && body[i] == '{' {
		s := jsonScanner{paths: paths, out: out, inexact: inexact, st: st}
		i = s.object(body, i, 1, 0)
	} else {
		i = jsonSkipValue(body, i, 0)
	}
	if i >= 0 {
		i = jsonSkipWS(body, i)
	}
	if i != len(body) {
		clear(out)
		clear(inexact)
		return errMalformedJSON
	}
	return nil
}

// The scanning functions below take the input and the position to scan at,
// and return the position after what they scanned, or -1 if the input is
// malformed.

// jsonScanner holds the paths being looked up while the objects on their
// route are scanned; everything else is only validated, by jsonSkipValue.
type jsonScanner struct {
	paths   []string
	out     []string
	inexact []bool // nil if not wanted
	st      []jsonPathState
}

// jsonPathState is the progress of one path along the route of objects the
// scanner is in.
type jsonPathState struct {
	// level is how many segments of the path match the keys leading to the
	// current object; the path looks for its next segment among the keys of
	// an object iff the object's level equals this. -1 disables the path.
	level int
	// path[seg:end] is the next segment to match; end == len(path) for the
	// last one.
	seg, end int
	// pending is level+1 while the value of a key that matched the path's
	// last segment in an object of level level is being scanned, else 0.
	pending int
}

// object scans the object at d[i] == '{', which is at nesting depth depth
// (1 for the top-level value) and at level level of the paths' route.
func (s *jsonScanner) object(d []byte, i, depth, level int) int {
	if depth > maxJSONDepth {
		return -1
	}
	i = jsonSkipWS(d, i+1)
	if i < len(d) && d[i] == '}' {
		return i + 1
	}
	var keyBuf [64]byte
	for {
		if i >= len(d) || d[i] != '"' {
			return -1
		}
		end, flags := jsonScanString(d, i)
		if end < 0 {
			return -1
		}
		key := d[i+1 : end-1]
		if flags != 0 && (flags&jsonStrEscaped != 0 || !utf8.Valid(key)) {
			key, _ = jsonAppendUnquoted(keyBuf[:0], key)
		}
		i = jsonSkipWS(d, end)
		if i >= len(d) || d[i] != ':' {
			return -1
		}
		i = jsonSkipWS(d, i+1)

		matched := false
		for k := range s.st {
			ps := &s.st[k]
			if ps.level != level {
				continue
			}
			p := s.paths[k]
			if p[ps.seg:ps.end] != string(key) {
				continue
			}
			if ps.end == len(p) {
				ps.pending = level + 1
			} else {
				ps.level++
				ps.seg = ps.end + 1
				ps.end = jsonSegmentEnd(p, ps.seg)
			}
			s.out[k] = "" // a later duplicate key replaces an earlier value
			if s.inexact != nil {
				s.inexact[k] = false
			}
			matched = true
		}
		if matched {
			i = s.matchedValue(d, i, depth, level, len(key))
		} else {
			i = jsonSkipValue(d, i, depth)
		}
		if i < 0 {
			return -1
		}

		i = jsonSkipWS(d, i)
		if i >= len(d) {
			return -1
		}
		switch d[i] {
		case ',':
			i = jsonSkipWS(d, i+1)
		case '}':
			return i + 1
		default:
			return -1
		}
	}
}

// matchedValue scans the value at d[i] of a key, keyLen bytes long, that
// some paths of level level matched: it stores the value for the paths that
// end there and descends with those that continue, then restores their
// state. depth is the number of containers enclosing the value.
func (s *jsonScanner) matchedValue(d []byte, i, depth, level, keyLen int) int {
	if i >= len(d) {
		return -1
	}
	var (
		end   = -1
		v     string
		set   bool
		exact = true
	)
	switch d[i] {
	case '{':
		end = s.object(d, i, depth+1, level+1)
	case '"':
		var flags int
		end, flags = jsonScanString(d, i)
		if end >= 0 {
			v, exact = jsonUnquote(d[i+1:end-1], flags)
			set = true
		}
	case 't':
		end = jsonScanLiteral(d, i, "true")
		v, set = "true", true
	case 'f':
		end = jsonScanLiteral(d, i, "false")
		v, set = "false", true
	case 'n':
		end = jsonScanLiteral(d, i, "null")
	case '[':
		end = jsonSkipValue(d, i, depth)
	default:
		end = jsonScanNumber(d, i)
		if end >= 0 {
			v, set = string(d[i:end]), true
		}
	}
	for k := range s.st {
		ps := &s.st[k]
		if ps.pending == level+1 {
			ps.pending = 0
			if set && end >= 0 {
				s.out[k] = v
				if s.inexact != nil {
					s.inexact[k] = !exact
				}
			}
		} else if ps.level == level+1 {
			ps.level = level
			ps.end = ps.seg - 1
			ps.seg = ps.end - keyLen
		}
	}
	return end
}

// jsonSkipValue validates the value at d[i], which has depth enclosing
// containers.
func jsonSkipValue(d []byte, i, depth int) int {
	if i >= len(d) {
		return -1
	}
	switch d[i] {
	case '{':
		if depth >= maxJSONDepth {
			return -1
		}
		i = jsonSkipWS(d, i+1)
		if i < len(d) && d[i] == '}' {
			return i + 1
		}
		for {
			if i >= len(d) || d[i] != '"' {
				return -1
			}
			if i, _ = jsonScanString(d, i); i < 0 {
				return -1
			}
			i = jsonSkipWS(d, i)
			if i >= len(d) || d[i] != ':' {
				return -1
			}
			if i = jsonSkipValue(d, jsonSkipWS(d, i+1), depth+1); i < 0 {
				return -1
			}
			i = jsonSkipWS(d, i)
			if i >= len(d) {
				return -1
			}
			switch d[i] {
			case ',':
				i = jsonSkipWS(d, i+1)
			case '}':
				return i + 1
			default:
				return -1
			}
		}
	case '[':
		if depth >= maxJSONDepth {
			return -1
		}
		i = jsonSkipWS(d, i+1)
		if i < len(d) && d[i] == ']' {
			return i + 1
		}
		for {
			if i = jsonSkipValue(d, i, depth+1); i < 0 {
				return -1
			}
			i = jsonSkipWS(d, i)
			if i >= len(d) {
				return -1
			}
			switch d[i] {
			case ',':
				i = jsonSkipWS(d, i+1)
			case ']':
				return i + 1
			default:
				return -1
			}
		}
	case '"':
		i, _ = jsonScanString(d, i)
		return i
	case 't':
		return jsonScanLiteral(d, i, "true")
	case 'f':
		return jsonScanLiteral(d, i, "false")
	case 'n':
		return jsonScanLiteral(d, i, "null")
	default:
		return jsonScanNumber(d, i)
	}
}

// jsonSkipWS returns the position of the first non-whitespace byte at or after
// i.
func jsonSkipWS(d []byte, i int) int {
	if i < len(d) && d[i] > ' ' {
		return i // fast path, inlined
	}
	return jsonSkipWSSlow(d, i)
}

func jsonSkipWSSlow(d []byte, i int) int {
	for i < len(d) {
		switch d[i] {
		case ' ', '\n', '\t', '\r':
			i++
			// Skip indentation 8 spaces at a time.
			for i+8 <= len(d) {
				if x := binary.LittleEndian.Uint64(d[i:]) ^ 0x2020202020202020; x != 0 {
					i += bits.TrailingZeros64(x) / 8
					break
				}
				i += 8
			}
			continue
		}
		break
	}
	return i
}

// Flags returned by jsonScanString.
const (
	jsonStrEscaped  = 1 << iota // contains a backslash escape
	jsonStrNonASCII             // contains a byte >= 0x80
)

// jsonStrPlain marks the string bytes that need no attention: all but the quote,
// the backslash, control characters and non-ASCII bytes.
var jsonStrPlain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// jsonScanString validates the string whose opening quote is at d[i]. flags
// tells whether its contents need unquoting.
func jsonScanString(d []byte, i int) (end, flags int) {
	i++
	for {
		// Skip 8 plain bytes at a time, up to the first byte that needs
		// attention; near the end of d, fall through to one at a time.
		for i+8 <= len(d) {
			if m := jsonStrSpecial(binary.LittleEndian.Uint64(d[i:])); m != 0 {
				i += bits.TrailingZeros64(m) / 8
				break
			}
			i += 8
		}
		if i >= len(d) {
			return -1, 0
		}
		switch c := d[i]; {
		case jsonStrPlain[c]:
			i++
		case c == '"':
			return i + 1, flags
		case c == '\\':
			flags |= jsonStrEscaped
			if i+1 >= len(d) {
				return -1, 0
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(d) || jsonHex4(d[i+2:i+6]) < 0 {
					return -1, 0
				}
				i += 6
			default:
				return -1, 0
			}
		case c < 0x20:
			return -1, 0
		default: // non-ASCII; like encoding/json, UTF-8 validity is not required
			flags |= jsonStrNonASCII
			i++
		}
	}
}

// jsonStrSpecial returns a word with the high bit set in the lowest byte of the 8
// bytes in x (little-endian) that is a quote, a backslash, a control
// character or non-ASCII, if there is one, and 0 otherwise. Higher set bits
// are not meaningful.
func jsonStrSpecial(x uint64) uint64 {
	const (
		lo = 0x0101010101010101
		hi = 0x8080808080808080
	)
	// For a byte b < 0x80 with no borrow into it, b-k sets the high bit iff
	// b < k; a borrow only comes out of a byte that is itself special.
	return (x | (x - 0x20*lo) | ((x ^ '"'*lo) - lo) | ((x ^ '\\'*lo) - lo)) & hi
}

// jsonScanNumber validates the number at d[i].
func jsonScanNumber(d []byte, i int) int {
	if i < len(d) && d[i] == '-' {
		i++
	}
	if i >= len(d) {
		return -1
	}
	switch c := d[i]; {
	case c == '0':
		i++
	case '1' <= c && c <= '9':
		i++
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
	default:
		return -1
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			return -1
		}
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			return -1
		}
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
	}
	return i
}

// jsonScanLiteral checks that lit is at d[i].
func jsonScanLiteral(d []byte, i int, lit string) int {
	if len(d)-i < len(lit) || string(d[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// jsonSegmentEnd returns the end of the path segment that starts at i.
func jsonSegmentEnd(path string, i int) int {
	if j := strings.IndexByte(path[i:], '.'); j >= 0 {
		return i + j
	}
	return len(path)
}

// jsonHex4 decodes the 4 hex digits at the start of b, or returns -1.
func jsonHex4(b []byte) rune {
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

// jsonUnquote returns the contents of a validated string as a Go string; flags
// are those from jsonScanString. exact is false if it held invalid UTF-8 or
// an unpaired surrogate escape (see jsonAppendUnquoted).
func jsonUnquote(raw []byte, flags int) (s string, exact bool) {
	if flags == 0 || flags == jsonStrNonASCII && utf8.Valid(raw) {
		return string(raw), true
	}
	var buf [128]byte
	b, exact := jsonAppendUnquoted(buf[:0], raw)
	return string(b), exact
}

// jsonAppendUnquoted appends to b the contents of the validated string raw
// (without its quotes) with escapes decoded, the way encoding/json does it:
// invalid UTF-8 bytes and unpaired surrogate escapes become U+FFFD, and
// exact is false if there was any.
func jsonAppendUnquoted(b, raw []byte) (_ []byte, exact bool) {
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
			rr, size := utf8.DecodeRune(raw[r:])
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
