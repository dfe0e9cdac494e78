package jetstream

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

func TestRefused(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nats.ErrMaxPayload, true},
		{fmt.Errorf("publish: %w", nats.ErrMaxPayload), true},
		{nats.ErrBadSubject, true},
		{&natsjs.APIError{ErrorCode: natsjs.JSErrCodeStreamMessageExceedsMaximum, Code: 400}, true},
		{nats.ErrTimeout, false},
		{natsjs.ErrNoStreamResponse, false},
		{nats.ErrNoResponders, false},
		{nats.ErrConnectionClosed, false},
		{nats.ErrDisconnected, false},
		{context.DeadlineExceeded, false},
		{errors.New("nats: timeout waiting for ack"), false},
	} {
		if got := Refused(tt.err); got != tt.want {
			t.Errorf("Refused(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
