package config

import (
	"testing"
	"time"
)

// The slack, twitch and discord presets: their defaults, Twitch's own
// tolerance, and a Discord public key checked at load.
func TestHandshakePresetSources(t *testing.T) {
	const discordKey = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
	c := mustParse(t, `
sources:
  - {name: slack, verify: slack, secrets: [s]}
  - {name: twitch, verify: twitch, secrets: [s]}
  - {name: twitch-strict, verify: twitch, secrets: [s], tolerance: 2m}
  - {name: discord, verify: discord, secrets: [`+discordKey+`]}
`, nil)
	want := []struct {
		idHeader, idField, typeHeader, typeField string
		tol                                      time.Duration
	}{
		{"", "event_id", "", "event.type", 5 * time.Minute},
		{"Twitch-Eventsub-Message-Id", "", "Twitch-Eventsub-Subscription-Type", "", 10 * time.Minute},
		{"Twitch-Eventsub-Message-Id", "", "Twitch-Eventsub-Subscription-Type", "", 2 * time.Minute},
		{"", "id", "", "type", 5 * time.Minute},
	}
	for i, w := range want {
		s := c.Sources[i]
		if s.IDHeader != w.idHeader || s.IDField != w.idField || s.TypeHeader != w.typeHeader || s.TypeField != w.typeField || s.Tolerance != w.tol {
			t.Errorf("%s: id %q/%q type %q/%q tolerance %v", s.Name, s.IDHeader, s.IDField, s.TypeHeader, s.TypeField, s.Tolerance)
		}
	}
	wantError(t, parseErr(t, "sources: [{name: d, verify: discord, secrets: ["+discordKey+", abc]}]\n", nil),
		"config: sources[0].secrets[1]: invalid discord public key: public key is not 64 hex digits")
}
