package config

import "testing"

// Each provider preset is accepted with its kind of secret and gets its
// ID and type locations from the signature registry.
func TestPresetSources(t *testing.T) {
	c := mustParse(t, `
sources:
  - {name: clerk, verify: svix, secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]}
  - {name: std-ed25519, verify: standard, secrets: [whpk_1SiA4o9hyqTCpIqC5V9HUakiiaeACeqfZTInDBbOir4=, whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]}
  - {name: clerk-own-id, verify: svix, secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw], id_field: data.id}
  - {name: shop, verify: shopify, secrets: [shpss_x, shpss_old]}
  - {name: shop-events, verify: shopify, secrets: [shpss_x], id_header: X-Shopify-Event-Id}
  - {name: paddle, verify: paddle, secrets: [pdl_ntfset_x], tolerance: 10s}
`, nil)
	want := []struct{ idHeader, idField, typeHeader, typeField string }{
		{"svix-id", "", "", "type"},
		{"webhook-id", "", "", "type"},
		{"", "data.id", "", "type"},
		{"X-Shopify-Webhook-Id", "", "X-Shopify-Topic", ""},
		{"X-Shopify-Event-Id", "", "X-Shopify-Topic", ""},
		{"", "event_id", "", "event_type"},
	}
	for i, w := range want {
		s := c.Sources[i]
		if s.IDHeader != w.idHeader || s.IDField != w.idField || s.TypeHeader != w.typeHeader || s.TypeField != w.typeField {
			t.Errorf("sources[%d] (%s): id %q/%q type %q/%q, want %+v", i, s.Name, s.IDHeader, s.IDField, s.TypeHeader, s.TypeField, w)
		}
	}
}
