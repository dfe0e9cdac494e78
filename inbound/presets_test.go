package inbound

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/signature"
)

// The provider presets over real HTTP into a real store: each event is
// identified and typed where its provider puts them, and kept with the
// headers its scheme keeps.
func TestPresetsEndToEnd(t *testing.T) {
	t.Parallel()
	edPriv := ed25519.NewKeyFromSeed([]byte("0123456789abcdef0123456789abcdef"))
	edPub := "whpk_" + base64.StdEncoding.EncodeToString(edPriv.Public().(ed25519.PublicKey))
	h := newHarnessFor(t, []Source{
		{Name: "clerk", Verify: "svix", Secrets: []string{standardSecret}},
		{Name: "ed", Verify: "standard", Secrets: []string{edPub}},
		{Name: "shop", Verify: "shopify", Secrets: []string{"shpss_secret"}},
		{Name: "paddle", Verify: "paddle", Secrets: []string{"pdl_ntfset_secret"}},
	}, Options{})
	now := h.clock()
	ts := strconv.FormatInt(now.Unix(), 10)
	key, err := signature.DecodeStandardSecret(standardSecret)
	if err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		source, id, typ string
		body            []byte
		headers         map[string]string
		kept            map[string]string
		untimed         bool // the scheme signs no timestamp
	}{
		{
			source: "clerk", id: "msg_2abc", typ: "user.created",
			body: []byte(`{"type":"user.created","data":{"id":"user_1"}}`),
			kept: map[string]string{"svix-id": "msg_2abc", "svix-timestamp": ts},
		},
		{
			source: "ed", id: "msg_ed1", typ: "invoice.paid",
			body: []byte(`{"type":"invoice.paid"}`),
			kept: map[string]string{"webhook-id": "msg_ed1", "webhook-timestamp": ts},
		},
		{
			source: "shop", id: "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043", typ: "orders/create",
			body: []byte(`{"id":820982911946154508,"email":"jon@example.com"}`),
			kept: map[string]string{
				"X-Shopify-Webhook-Id": "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043", "X-Shopify-Topic": "orders/create",
				"X-Shopify-Shop-Domain": "example.myshopify.com",
			},
			untimed: true,
		},
		{
			source: "paddle", id: "evt_01hsdn97563968dy0szkmgjwh3", typ: "price.created",
			body: []byte(`{"event_id":"evt_01hsdn97563968dy0szkmgjwh3","event_type":"price.created","data":{}}`),
			kept: map[string]string{},
		},
	}
	cases[0].headers = map[string]string{
		"svix-id": "msg_2abc", "svix-timestamp": ts,
		"svix-signature": signature.SignStandard(key, "msg_2abc", now, cases[0].body),
	}
	cases[1].headers = map[string]string{
		"webhook-id": "msg_ed1", "webhook-timestamp": ts,
		"webhook-signature": "v1a," + base64.StdEncoding.EncodeToString(
			ed25519.Sign(edPriv, []byte("msg_ed1."+ts+"."+string(cases[1].body)))),
	}
	shopMAC := hmac.New(sha256.New, []byte("shpss_secret"))
	shopMAC.Write(cases[2].body)
	cases[2].headers = map[string]string{
		"X-Shopify-Hmac-Sha256": base64.StdEncoding.EncodeToString(shopMAC.Sum(nil)),
		"X-Shopify-Webhook-Id":  cases[2].id, "X-Shopify-Topic": "orders/create",
		"X-Shopify-Shop-Domain": "example.myshopify.com",
	}
	paddleMAC := hmac.New(sha256.New, []byte("pdl_ntfset_secret"))
	paddleMAC.Write([]byte(ts + ":" + string(cases[3].body)))
	cases[3].headers = map[string]string{"Paddle-Signature": "ts=" + ts + ";h1=" + hex.EncodeToString(paddleMAC.Sum(nil))}
	for _, c := range cases {
		a := h.post(t, c.source, c.body, c.headers)
		if a.status != 200 || a.body["status"] != OutcomeAccepted || a.body["event_id"] != c.id || a.body["event_type"] != c.typ {
			t.Fatalf("%s: %d %v", c.source, a.status, a.body)
		}
		ev := h.stored(t, c.source, c.id)
		if ev == nil || ev.Type != c.typ {
			t.Fatalf("%s: stored %+v", c.source, ev)
		}
		var kept map[string]string
		if err := json.Unmarshal(ev.Headers, &kept); err != nil {
			t.Fatal(err)
		}
		for k, v := range c.kept {
			if kept[k] != v {
				t.Errorf("%s: kept headers %v, want %s: %s", c.source, kept, k, v)
			}
		}
		for k := range kept {
			if strings.Contains(strings.ToLower(k), "signature") || strings.Contains(strings.ToLower(k), "hmac") {
				t.Errorf("%s: signature header kept", c.source)
			}
		}
		// Forged: the same request with another body.
		if a := h.post(t, c.source, append(c.body[:len(c.body):len(c.body)], ' '), c.headers); a.status != 401 {
			t.Fatalf("%s forged: %d %v", c.source, a.status, a.body)
		}
		// A copy is a duplicate.
		if a := h.post(t, c.source, c.body, c.headers); a.status != 200 || a.body["status"] != OutcomeDuplicate {
			t.Fatalf("%s copy: %d %v", c.source, a.status, a.body)
		}
		if c.untimed {
			continue
		}
		// Replayed too late.
		h.setNow(now.Add(6 * time.Minute))
		if a := h.post(t, c.source, c.body, c.headers); a.status != 401 || a.code() != "timestamp_out_of_tolerance" {
			t.Fatalf("%s stale: %d %v", c.source, a.status, a.body)
		}
		h.setNow(now)
	}
}
