package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/jetstream"
)

// checkPayload refuses a body limit the broker could not carry: every
// source's max_body and tasks.max_body, with jetstream.HeaderRoom left for
// the message's headers, must fit the broker's max payload (the embedded
// server's, or what an external server announced at connect). A task's
// body travels base64-encoded, so tasks.max_body gets three quarters of
// it. A limit left at its default is lowered to fit instead, with a
// warning. The error is a *config.Error: the gateway exits 2.
func (a *App) checkPayload(context.Context) error {
	limit := a.broker.MaxPayload()
	if limit <= 0 {
		a.log.Warn("nats not reached at start: max_body is not checked against the server's max payload; an event it refuses is parked (GET /v1/outbox/parked)")
		return nil
	}
	room := limit - jetstream.HeaderRoom
	var errs []error
	check := func(path string, p *int, fits int64, what string) {
		if int64(*p) <= fits {
			return
		}
		if *p == config.DefaultMaxBody {
			a.log.Warn("max_body left at its default is lowered to fit the broker's max payload",
				"key", path, "max_body", fits, "default", *p, "max_payload", limit)
			*p = int(fits)
			return
		}
		errs = append(errs, &config.Error{Path: path, Msg: fmt.Sprintf(
			"%d bytes does not fit the broker's max payload of %d bytes: at most %d (%s); lower it, or raise the NATS server's max_payload",
			*p, limit, fits, what)})
	}
	for i := range a.cfg.Sources {
		check(fmt.Sprintf("sources[%d].max_body", i), &a.cfg.Sources[i].MaxBody, room,
			fmt.Sprintf("%d bytes are left for the message headers", jetstream.HeaderRoom))
	}
	check("tasks.max_body", &a.cfg.Tasks.MaxBody, room*3/4,
		fmt.Sprintf("a task's body travels base64-encoded, and %d bytes are left for the message headers", jetstream.HeaderRoom))
	return errors.Join(errs...)
}
