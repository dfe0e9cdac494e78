package store

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"math"
	"strings"
)

// UIDPrefix begins every delivery's API ID (see DeliveryUID).
const UIDPrefix = "dl_"

// Bounds of the parts of a delivery ID: route and source names as the
// configuration allows them (at most 64 bytes), an event ID as intake
// takes it (at most 255 bytes, inbound.MaxEventIDLen).
const (
	maxIDName    = 64
	maxIDEventID = 255
)

// DeliveryUID is the API ID of the delivery of an event (source, eventID)
// to a route, the same on every gateway of a cluster (and on a single
// gateway). It is reversible, not stored: "dl_" and the base64url
// (unpadded) of
//
//	len(route) route len(source) source eventID
//
// where each len is a uvarint (one byte: names are at most 64 bytes).
// ParseDeliveryID takes it back; parts longer than the configuration and
// intake allow give an ID it refuses (never another delivery's).
func DeliveryUID(route, source, eventID string) string {
	var buf [2 + 2*maxIDName + maxIDEventID]byte
	b := appendIDParts(buf[:0], route, source, eventID)
	out := make([]byte, len(UIDPrefix)+base64.RawURLEncoding.EncodedLen(len(b)))
	copy(out, UIDPrefix)
	base64.RawURLEncoding.Encode(out[len(UIDPrefix):], b)
	return string(out)
}

// appendIDParts appends the parts of a delivery ID, length-prefixed.
func appendIDParts(b []byte, route, source, eventID string) []byte {
	b = binary.AppendUvarint(b, uint64(len(route)))
	b = append(b, route...)
	b = binary.AppendUvarint(b, uint64(len(source)))
	b = append(b, source...)
	return append(b, eventID...)
}

// ParseDeliveryID returns the route, source and event ID a DeliveryUID was
// made of. ok is false for anything else: another prefix, base64 that is
// not the canonical encoding, a route or source that is empty or longer
// than 64 bytes, an event ID empty or longer than 255 bytes.
func ParseDeliveryID(s string) (route, source, eventID string, ok bool) {
	rest, found := strings.CutPrefix(s, UIDPrefix)
	if !found || len(rest) > base64.RawURLEncoding.EncodedLen(2+2*maxIDName+maxIDEventID) {
		return "", "", "", false
	}
	var buf [2 + 2*maxIDName + maxIDEventID]byte
	b := buf[:base64.RawURLEncoding.DecodedLen(len(rest))]
	// Strict: no stray bits; the length check: no ignored newlines. One
	// delivery has one ID.
	n, err := base64.RawURLEncoding.Strict().Decode(b, []byte(rest))
	if err != nil || base64.RawURLEncoding.EncodedLen(n) != len(rest) {
		return "", "", "", false
	}
	return idParts(b[:n])
}

// idParts splits the bytes of a delivery ID (appendIDParts).
func idParts(b []byte) (route, source, eventID string, ok bool) {
	var parts [2]string
	for i := range parts {
		if len(b) == 0 {
			return "", "", "", false
		}
		n := int(b[0]) // a one-byte uvarint: a longer one is over the bound
		if n == 0 || n > maxIDName || n > len(b)-1 {
			return "", "", "", false
		}
		parts[i], b = string(b[1:1+n]), b[1+n:]
	}
	if len(b) == 0 || len(b) > maxIDEventID {
		return "", "", "", false
	}
	return parts[0], parts[1], string(b), true
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
// (CreatedAt, Source, EventID, Route), which is the same on every gateway.
type DeliveryCursor struct {
	CreatedAt              int64 // unix ms
	Route, Source, EventID string
}

// String encodes the cursor for an API answer: after the kind byte, the
// time (uvarint) and the bytes of the delivery's ID (appendIDParts).
func (c DeliveryCursor) String() string {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+2+2*maxIDName+maxIDEventID)
	b = append(b, deliveryCursorKind)
	b = binary.AppendUvarint(b, uint64(max(c.CreatedAt, 0)))
	b = appendIDParts(b, c.Route, c.Source, c.EventID)
	return base64.RawURLEncoding.EncodeToString(b)
}

// ParseDeliveryCursor decodes a cursor made by DeliveryCursor.String.
func ParseDeliveryCursor(s string) (DeliveryCursor, error) {
	b, err := decodeCursor(s, deliveryCursorKind, false)
	if err != nil {
		return DeliveryCursor{}, err
	}
	at, rest, ok := cursorInt(b)
	if !ok {
		return DeliveryCursor{}, ErrBadCursor
	}
	route, source, eventID, ok := idParts(rest)
	if !ok {
		return DeliveryCursor{}, ErrBadCursor
	}
	return DeliveryCursor{CreatedAt: at, Route: route, Source: source, EventID: eventID}, nil
}

// Cursor is the delivery's position in list order.
func (d *Delivery) Cursor() DeliveryCursor {
	return DeliveryCursor{CreatedAt: d.CreatedAt.UnixMilli(), Route: d.Route, Source: d.Source, EventID: d.EventID}
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
