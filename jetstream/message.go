package jetstream

import (
	"errors"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/store"
)

// Message headers on every inbound event message.
const (
	HeaderSource     = "Hookgate-Source"
	HeaderEventID    = "Hookgate-Event-Id"
	HeaderEventType  = "Hookgate-Event-Type"
	HeaderReceivedAt = "Hookgate-Received-At" // RFC 3339, milliseconds
	HeaderSeq        = "Hookgate-Seq"         // the store's intake sequence
)

// MsgID is the Nats-Msg-Id of an event's first message: JetStream drops a
// re-publish of the same event inside the stream's duplicate window.
func MsgID(source, eventID string) string { return source + ":" + eventID }

// EventMsgID is the Nats-Msg-Id ev's message is published under: MsgID,
// or for an event put back in the outbox to be published anew
// (ev.RequeuedAt set: an operator's retry or replay cut short)
// <source>/requeued-<unix ms>:<id>, one ID per requeue. The window still
// holds the first message's ID when the requeue comes soon after it (a
// quick restart), while the route's consumer may have acked that message
// already: under MsgID the copy would be dropped and the delivery never
// run. A re-publish of one requeue (an ack lost) is still dropped. No
// MsgID has a '/' before its first ':' (source names cannot hold either),
// so the two kinds never meet.
func EventMsgID(ev *store.Event) string {
	if ev.RequeuedAt.IsZero() {
		return MsgID(ev.Source, ev.ID)
	}
	return ev.Source + "/requeued-" + strconv.FormatInt(ev.RequeuedAt.UnixMilli(), 10) + ":" + ev.ID
}

// Requeued reports whether a message of the events stream, by its headers,
// is a copy of its event published anew (EventMsgID of a requeue), not
// its first publication nor one published again under its first ID.
func Requeued(h nats.Header) bool {
	id, _, _ := strings.Cut(h.Get(nats.MsgIdHdr), ":")
	return strings.Contains(id, "/requeued-")
}

// PublishEvent publishes ev's message to the events stream, under its
// EventMsgID, without waiting for the PubAck: the future brings it.
func (b *Broker) PublishEvent(ev *store.Event) (natsjs.PubAckFuture, error) {
	return b.js().PublishMsgAsync(eventMsg(ev, b.subj), natsjs.WithMsgID(EventMsgID(ev)))
}

// Refused reports whether err is the broker refusing a message for its
// content (too large, an invalid subject): publishing it again cannot
// succeed, unlike after a timeout, a missing responder or a lost
// connection, which are retried in order.
func Refused(err error) bool {
	if errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrBadSubject) {
		return true
	}
	var apiErr *natsjs.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case natsjs.JSErrCodeStreamMessageExceedsMaximum, natsjs.JSErrCodeBadRequest:
			return true
		}
	}
	return false
}

// eventHeaders is the number of headers eventMsg sets.
const eventHeaders = 6

// eventMsg is the message of an event: its subject of subj (Subject's
// for the default deployment), its body, and its identity in headers.
func eventMsg(ev *store.Event, subj subjects) *nats.Msg {
	// One backing array for the header values, one for the texts made
	// here, instead of an allocation per header.
	var buf [64]byte
	b := ev.ReceivedAt.UTC().AppendFormat(buf[:0], "2006-01-02T15:04:05.000Z07:00")
	tsEnd := len(b)
	b = strconv.AppendInt(b, ev.Seq, 10)
	texts := string(b)
	vals := make([]string, eventHeaders)
	vals[0], vals[1], vals[2] = ev.Source, ev.ID, ev.Type
	vals[3], vals[4] = texts[:tsEnd], texts[tsEnd:]
	h := make(nats.Header, eventHeaders)
	h[HeaderSource] = vals[0:1:1]
	h[HeaderEventID] = vals[1:2:2]
	h[HeaderEventType] = vals[2:3:3]
	h[HeaderReceivedAt] = vals[3:4:4]
	h[HeaderSeq] = vals[4:5:5]
	if ev.ContentType != "" {
		vals[5] = ev.ContentType
		h["Content-Type"] = vals[5:6:6]
	}
	return &nats.Msg{Subject: subject(subj, ev.Source, ev.Type), Header: h, Data: ev.Body}
}
