package cluster

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

func startTakes(t *testing.T, js natsjs.JetStream, gateway string) *Takes {
	t.Helper()
	tk, err := NewTakes(TakesConfig{Gateway: gateway, JetStream: func() natsjs.JetStream { return js },
		Wait: 2 * time.Second, TTL: 3 * time.Second}, watchLog())
	if err != nil {
		t.Fatal(err)
	}
	if err := tk.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tk.Stop(context.Background()) })
	return tk
}

// takesType is a match of an event of source s and type typ.
func takesType(typ string) func(sources, events []string) bool {
	return func(sources, events []string) bool {
		return slices.Contains(sources, "s") && (len(events) == 0 || slices.Contains(events, typ))
	}
}

// A gateway hears what another gateway's route takes, not its own; a
// record deleted at a clean stop no longer counts; until its watch has
// read the bucket, and what it wrote itself, a gateway cannot tell and
// says taken.
func TestTakesElsewhere(t *testing.T) {
	srv := gatewaytest.RunNATS(t, gatewaytest.FreePort(t), t.TempDir())
	js1, js2 := connect(t, srv.ClientURL()), connect(t, srv.ClientURL())
	one := startTakes(t, js1, "gw-1")
	two := startTakes(t, js2, "gw-2")
	wait := func(what string, tk *Takes, typ string, want bool) {
		t.Helper()
		gatewaytest.WaitFor(t, what, 30*time.Second, func() (bool, string) {
			got := tk.Elsewhere("r", takesType(typ))
			return got == want, fmt.Sprint(got)
		})
	}
	announce := func(tk *Takes, events ...string) {
		t.Helper()
		gatewaytest.WaitFor(t, "announce", 30*time.Second, func() (bool, string) {
			err := tk.Announce(context.Background(), "r", []string{"s"}, events)
			return err == nil, fmt.Sprint(err)
		})
	}
	announce(one, "t")
	announce(two, "t", "u")
	wait("gw-1 hears gw-2 takes u", one, "u", true)
	wait("gw-1 hears no one else takes v", one, "v", false)
	wait("gw-2 does not count its own record", two, "u", false)

	if err := two.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	wait("gw-1 hears gw-2 stopped", one, "u", false)
}
