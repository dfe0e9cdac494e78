package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/jetstream"
)

// checkPayload refuses a body limit the broker could not carry (see
// fitPayload), against the embedded server's max payload or what an
// external server announced at connect. A limit left at its default is
// lowered to fit instead, noted at info (the operator set nothing, and an
// external NATS at its own 1 MiB default has it lowered at every start).
// The error is a *config.Error: the gateway exits 2.
func (a *App) checkPayload(context.Context) error {
	limit := a.broker.MaxPayload()
	if limit <= 0 {
		a.log.Warn("nats not reached at start: max_body is not checked against the server's max payload; an event it refuses is parked (GET /v1/outbox/parked)")
		return nil
	}
	return fitPayload(a.cfg, limit, func(path string, fits, def int) {
		a.log.Info("max_body left at its default is lowered to fit the broker's max payload",
			"key", path, "max_body", fits, "default", def, "max_payload", limit)
	})
}

// CheckConfig checks what a loaded config must also meet before the
// gateway starts and that is known without starting it: with the embedded
// server, every max_body fits its max payload (an external server's is
// checked at start). gateway check-config runs it.
func CheckConfig(cfg *config.Config) error {
	if cfg.NATS.URL != "" {
		return nil
	}
	return fitPayload(cfg, jetstream.EmbeddedMaxPayload, func(string, int, int) {})
}

// fitPayload refuses a body limit a broker of max payload limit could not
// carry: every source's max_body and tasks.max_body, with
// jetstream.HeaderRoom left for the message's headers, must fit it. A
// task's body travels base64-encoded, so tasks.max_body gets three
// quarters of it. A limit left at its default is lowered to fit instead,
// and lowered told.
func fitPayload(cfg *config.Config, limit int64, lowered func(path string, fits, def int)) error {
	room := limit - jetstream.HeaderRoom
	var errs []error
	check := func(path string, p *int, fits int64, what string) {
		if int64(*p) <= fits {
			return
		}
		if *p == config.DefaultMaxBody {
			lowered(path, int(fits), *p)
			*p = int(fits)
			return
		}
		fix := "lower it, or raise the NATS server's max_payload"
		if cfg.NATS.URL == "" {
			fix = "lower it (the embedded server's max payload is fixed)"
		}
		errs = append(errs, &config.Error{Path: path, Msg: fmt.Sprintf(
			"%d bytes does not fit the broker's max payload of %d bytes: at most %d (%s); %s",
			*p, limit, fits, what, fix)})
	}
	for i := range cfg.Sources {
		check(fmt.Sprintf("sources[%d].max_body", i), &cfg.Sources[i].MaxBody, room,
			fmt.Sprintf("%d bytes are left for the message headers", jetstream.HeaderRoom))
	}
	check("tasks.max_body", &cfg.Tasks.MaxBody, room*3/4,
		fmt.Sprintf("a task's body travels base64-encoded, and %d bytes are left for the message headers", jetstream.HeaderRoom))
	return errors.Join(errs...)
}
