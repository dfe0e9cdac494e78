package store

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"strconv"
	"strings"
)

// UIDPrefix begins every delivery's API ID (see DeliveryUID).
const UIDPrefix = "dl_"

// DeliveryUID is the API ID of the delivery of an event (source, eventID)
// to a route: "dl_" and 32 hex digits, derived from those three alone, so
// every gateway of a cluster (and a single gateway) gives one delivery the
// same ID. The store sets it on every delivery it inserts.
func DeliveryUID(route, source, eventID string) string {
	return DerivedID(UIDPrefix, route, source, eventID)
}

// ValidUID reports whether s has the form of a DeliveryUID.
func ValidUID(s string) bool {
	if len(s) != len(UIDPrefix)+32 || s[:len(UIDPrefix)] != UIDPrefix {
		return false
	}
	for i := len(UIDPrefix); i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// DerivedID is prefix (at most 8 bytes) and the first 16 bytes, in hex, of
// the SHA-256 of "len:part" for route, source and eventID: the material of
// both a delivery's API ID and its default Idempotency-Key. Built in stack
// buffers: it runs once per delivery round.
func DerivedID(prefix, route, source, eventID string) string {
	var buf [256]byte
	b := buf[:0]
	for _, part := range [3]string{route, source, eventID} {
		b = strconv.AppendInt(b, int64(len(part)), 10)
		b = append(b, ':')
		b = append(b, part...)
	}
	sum := sha256.Sum256(b)
	var out [8 + 32]byte
	n := copy(out[:8], prefix)
	hex.Encode(out[n:], sum[:16])
	return string(out[:n+32])
}

// Cursors are opaque to clients: base64url (unpadded) of a kind byte and
// the position's values. The kind bytes make every cursor begin with a
// letter; the cursors of earlier versions (decimal numbers) begin with a
// digit.
const (
	deliveryCursorKind = 'D'
	eventCursorKind    = 'E'
)

// Cursor errors.
var (
	// ErrOldCursor is a cursor of an earlier version's form (a local row
	// number, which names different rows on each gateway).
	ErrOldCursor = errors.New("a cursor of an earlier version")
	// ErrBadCursor is a string that is no cursor of this version.
	ErrBadCursor = errors.New("malformed cursor")
)

// DeliveryCursor is a position in the deliveries' list order,
// (CreatedAt, UID), which is the same on every gateway.
type DeliveryCursor struct {
	CreatedAt int64 // unix ms
	UID       string
}

// String encodes the cursor for an API answer.
func (c DeliveryCursor) String() string {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(c.UID))
	b = append(b, deliveryCursorKind)
	b = binary.AppendUvarint(b, uint64(max(c.CreatedAt, 0)))
	b = append(b, c.UID...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// ParseDeliveryCursor decodes a cursor made by DeliveryCursor.String.
func ParseDeliveryCursor(s string) (DeliveryCursor, error) {
	b, err := decodeCursor(s, deliveryCursorKind, false)
	if err != nil {
		return DeliveryCursor{}, err
	}
	at, rest, ok := cursorInt(b)
	// A uid of the derived form, or a rowid's (migration 0011).
	if !ok || len(rest) > 64 || !strings.HasPrefix(string(rest), UIDPrefix) {
		return DeliveryCursor{}, ErrBadCursor
	}
	return DeliveryCursor{CreatedAt: at, UID: string(rest)}, nil
}

// Cursor is the delivery's position in list order.
func (d *Delivery) Cursor() DeliveryCursor {
	return DeliveryCursor{CreatedAt: d.CreatedAt.UnixMilli(), UID: d.UID}
}

// EventListCursor is a position in the events' list order, (ReceivedAt,
// Source, EventID), which is the same on every gateway.
type EventListCursor struct {
	ReceivedAt      int64 // unix ms
	Source, EventID string
}

// String encodes the cursor for an API answer.
func (c EventListCursor) String() string {
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64+len(c.Source)+len(c.EventID))
	b = append(b, eventCursorKind)
	b = binary.AppendUvarint(b, uint64(max(c.ReceivedAt, 0)))
	b = binary.AppendUvarint(b, uint64(len(c.Source)))
	b = append(b, c.Source...)
	b = append(b, c.EventID...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// ParseEventCursor decodes a cursor made by EventListCursor.String.
func ParseEventCursor(s string) (EventListCursor, error) {
	b, err := decodeCursor(s, eventCursorKind, true)
	if err != nil {
		return EventListCursor{}, err
	}
	at, rest, ok := cursorInt(b)
	if !ok {
		return EventListCursor{}, ErrBadCursor
	}
	n, m := binary.Uvarint(rest)
	if m <= 0 || n > uint64(len(rest)-m) {
		return EventListCursor{}, ErrBadCursor
	}
	rest = rest[m:]
	return EventListCursor{ReceivedAt: at, Source: string(rest[:n]), EventID: string(rest[n:])}, nil
}

// decodeCursor returns a cursor's bytes after its kind byte. An earlier
// version's cursor (digits; for events, digits-digits) is ErrOldCursor.
func decodeCursor(s string, kind byte, pair bool) ([]byte, error) {
	if old(s, pair) {
		return nil, ErrOldCursor
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil || len(b) == 0 || b[0] != kind {
		return nil, ErrBadCursor
	}
	return b[1:], nil
}

// old reports whether s is a decimal number or, with pair, two joined by
// a '-'.
func old(s string, pair bool) bool {
	digits := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '-' && pair && digits > 0 && i < len(s)-1:
			pair, digits = false, 0
		default:
			return false
		}
	}
	return digits > 0
}

// cursorInt reads a cursor's time.
func cursorInt(b []byte) (int64, []byte, bool) {
	v, n := binary.Uvarint(b)
	if n <= 0 || v > math.MaxInt64 {
		return 0, nil, false
	}
	return int64(v), b[n:], true
}
