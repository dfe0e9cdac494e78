package inbound

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/hookgate/hookgate/cluster"
	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/signature"
)

// rawAnswer is an answer as it came: status, Content-Type and body.
type rawAnswer struct {
	status int
	ctype  string
	body   string
}

func (h *harness) postRaw(t *testing.T, source string, body []byte, headers map[string]string) rawAnswer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.url+"/webhooks/"+source, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return rawAnswer{resp.StatusCode, resp.Header.Get("Content-Type"), string(raw)}
}

// event decodes an accepted or duplicate answer.
func (a rawAnswer) event(t *testing.T) (status, id, typ string) {
	t.Helper()
	var m map[string]string
	if a.status != http.StatusOK || json.Unmarshal([]byte(a.body), &m) != nil {
		t.Fatalf("answer %d %q, want 200 and an event", a.status, a.body)
	}
	return m["status"], m["event_id"], m["event_type"]
}

func (a rawAnswer) errorCode(t *testing.T) string {
	t.Helper()
	var m struct {
		Error struct{ Code string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(a.body), &m); err != nil {
		t.Fatalf("answer %d %q is not a JSON error", a.status, a.body)
	}
	return m.Error.Code
}

func (h *harness) handshakes(source string) float64 {
	return testutil.ToFloat64(h.metrics.requests.WithLabelValues(source, OutcomeHandshake))
}

const slackSecret = "slack-signing-secret-0123456789"

func slackHeaders(secret string, ts time.Time, body []byte) map[string]string {
	return map[string]string{
		signature.HeaderSlackTimestamp: strconv.FormatInt(ts.Unix(), 10),
		signature.HeaderSlackSignature: signature.SignSlack(secret, ts.Unix(), body),
	}
}

func TestSlackPreset(t *testing.T) {
	t.Parallel()
	h := newHarnessFor(t, []Source{{Name: "slack", Verify: "slack", Secrets: []string{slackSecret}}}, Options{})
	now := time.Unix(1700000000, 0)
	h.setNow(now)

	// The Events API's url_verification (Slack's documented body): signed,
	// answered with the challenge, not stored.
	verify := []byte(`{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`)
	a := h.postRaw(t, "slack", verify, slackHeaders(slackSecret, now, verify))
	if a.status != 200 || a.body != "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" || a.ctype != "text/plain; charset=utf-8" {
		t.Fatalf("url_verification: %+v", a)
	}
	// A forged one is refused before its challenge is looked at.
	if a = h.postRaw(t, "slack", verify, slackHeaders("other-secret", now, verify)); a.status != 401 || a.errorCode(t) != "invalid_signature" {
		t.Fatalf("forged url_verification: %+v", a)
	}
	if a = h.postRaw(t, "slack", verify, slackHeaders(slackSecret, now.Add(-6*time.Minute), verify)); a.status != 401 || a.errorCode(t) != "timestamp_out_of_tolerance" {
		t.Fatalf("stale url_verification: %+v", a)
	}
	// A challenge that cannot be echoed as it is: 400, not stored.
	bad := []byte(`{"type":"url_verification","challenge":"a b\n<script>"}`)
	if a = h.postRaw(t, "slack", bad, slackHeaders(slackSecret, now, bad)); a.status != 400 || a.body != "invalid challenge\n" {
		t.Fatalf("bad challenge: %+v", a)
	}
	if n := h.count(t); n != 0 {
		t.Fatalf("%d events stored by handshakes", n)
	}
	if n := h.handshakes("slack"); n != 2 {
		t.Fatalf("handshakes counted %v, want 2", n)
	}

	// An event: ID event_id, type event.type.
	ev := []byte(`{"token":"x","team_id":"T1","type":"event_callback","event_id":"Ev08MFMKH6","event_time":1700000000,"event":{"type":"app_mention","text":"hi"}}`)
	status, id, typ := h.postRaw(t, "slack", ev, slackHeaders(slackSecret, now, ev)).event(t)
	if status != OutcomeAccepted || id != "Ev08MFMKH6" || typ != "app_mention" {
		t.Fatalf("event: %s %s %s", status, id, typ)
	}
	// Slack's retry, signed anew a minute later, is the same event.
	retry := slackHeaders(slackSecret, now.Add(time.Minute), ev)
	retry["X-Slack-Retry-Num"], retry["X-Slack-Retry-Reason"] = "1", "http_timeout"
	h.setNow(now.Add(time.Minute))
	if status, _, _ = h.postRaw(t, "slack", ev, retry).event(t); status != OutcomeDuplicate {
		t.Fatalf("retry: %s, want duplicate", status)
	}
	// Without event.type the type is the body's type.
	noInner := []byte(`{"type":"event_callback","event_id":"Ev2"}`)
	if _, id, typ = h.postRaw(t, "slack", noInner, slackHeaders(slackSecret, now, noInner)).event(t); id != "Ev2" || typ != "event_callback" {
		t.Fatalf("no event.type: %s %s", id, typ)
	}
	// The headers kept with the event: the timestamp, never the signature.
	stored := h.stored(t, "slack", "Ev08MFMKH6")
	var kept map[string]string
	if err := json.Unmarshal(stored.Headers, &kept); err != nil {
		t.Fatal(err)
	}
	if kept[signature.HeaderSlackTimestamp] != "1700000000" || kept[signature.HeaderSlackSignature] != "" {
		t.Fatalf("kept headers %v", kept)
	}
	if n := h.count(t); n != 2 {
		t.Fatalf("%d events stored, want 2", n)
	}
}

const twitchSecret = "twitch-eventsub-secret"

func twitchHeaders(secret, id, msgType string, ts time.Time, body []byte) map[string]string {
	stamp := ts.UTC().Format(time.RFC3339Nano)
	return map[string]string{
		signature.HeaderTwitchMessageID:        id,
		signature.HeaderTwitchMessageTimestamp: stamp,
		signature.HeaderTwitchMessageSignature: signature.SignTwitch(secret, id, stamp, body),
		signature.HeaderTwitchMessageType:      msgType,
		signature.HeaderTwitchSubscriptionType: "channel.follow",
		"Twitch-Eventsub-Subscription-Version": "2",
		"Twitch-Eventsub-Message-Retry":        "0",
	}
}

func TestTwitchPreset(t *testing.T) {
	t.Parallel()
	h := newHarnessFor(t, []Source{{Name: "twitch", Verify: "twitch", Secrets: []string{twitchSecret}}}, Options{})
	now := time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)
	h.setNow(now)

	// The documented verification request: the raw challenge as text.
	verify := []byte(`{"challenge":"pogchamp-kappa-360noscope-vohiyo","subscription":{"id":"f1c2a387-161a-49f9-a165-0f21d7a4e1c4","status":"webhook_callback_verification_pending","type":"channel.follow","version":"1","cost":1,"condition":{"broadcaster_user_id":"12826"},"transport":{"method":"webhook","callback":"https://example.com/webhooks/callback"},"created_at":"2019-11-16T10:11:12.634234626Z"}}`)
	a := h.postRaw(t, "twitch", verify, twitchHeaders(twitchSecret, "m-verify", "webhook_callback_verification", now, verify))
	if a.status != 200 || a.body != "pogchamp-kappa-360noscope-vohiyo" || a.ctype != "text/plain; charset=utf-8" {
		t.Fatalf("verification: %+v", a)
	}
	if a = h.postRaw(t, "twitch", verify, twitchHeaders("forged", "m-verify", "webhook_callback_verification", now, verify)); a.status != 401 {
		t.Fatalf("forged verification: %+v", a)
	}
	noChallenge := []byte(`{"subscription":{}}`)
	if a = h.postRaw(t, "twitch", noChallenge, twitchHeaders(twitchSecret, "m-v2", "webhook_callback_verification", now, noChallenge)); a.status != 400 {
		t.Fatalf("verification without a challenge: %+v", a)
	}
	if n := h.count(t); n != 0 {
		t.Fatalf("%d events stored by handshakes", n)
	}

	// A notification: ID the message id, type the subscription type.
	note := []byte(`{"subscription":{"type":"channel.follow","version":"2"},"event":{"user_id":"1234"}}`)
	status, id, typ := h.postRaw(t, "twitch", note, twitchHeaders(twitchSecret, "m-1", "notification", now, note)).event(t)
	if status != OutcomeAccepted || id != "m-1" || typ != "channel.follow" {
		t.Fatalf("notification: %s %s %s", status, id, typ)
	}
	// Sent again (same message id, a later timestamp): a duplicate.
	h.setNow(now.Add(time.Minute))
	if status, _, _ = h.postRaw(t, "twitch", note, twitchHeaders(twitchSecret, "m-1", "notification", now.Add(time.Minute), note)).event(t); status != OutcomeDuplicate {
		t.Fatalf("resent: %s", status)
	}
	// A revocation is an event.
	rev := []byte(`{"subscription":{"type":"channel.follow","status":"authorization_revoked"}}`)
	if status, id, _ = h.postRaw(t, "twitch", rev, twitchHeaders(twitchSecret, "m-rev", "revocation", now, rev)).event(t); status != OutcomeAccepted || id != "m-rev" {
		t.Fatalf("revocation: %s %s", status, id)
	}
	// Twitch's 10 minutes, not the general 5.
	h.setNow(now.Add(9 * time.Minute))
	if status, _, _ = h.postRaw(t, "twitch", note, twitchHeaders(twitchSecret, "m-9", "notification", now, note)).event(t); status != OutcomeAccepted {
		t.Fatalf("9 minutes old: %s", status)
	}
	h.setNow(now.Add(11 * time.Minute))
	if a = h.postRaw(t, "twitch", note, twitchHeaders(twitchSecret, "m-11", "notification", now, note)); a.status != 401 || a.errorCode(t) != "timestamp_out_of_tolerance" {
		t.Fatalf("11 minutes old: %+v", a)
	}
	if n := h.count(t); n != 3 {
		t.Fatalf("%d events stored, want 3", n)
	}
}

func TestDiscordPreset(t *testing.T) {
	t.Parallel()
	seed, _ := hex.DecodeString("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60") // RFC 8032 7.1 test 1
	key := ed25519.NewKeyFromSeed(seed)
	_, other, _ := ed25519.GenerateKey(nil)
	public := hex.EncodeToString(key.Public().(ed25519.PublicKey))
	h := newHarnessFor(t, []Source{{Name: "discord", Verify: "discord", Secrets: []string{public}}}, Options{})
	now := time.Unix(1700000000, 0)
	h.setNow(now)
	sign := func(k ed25519.PrivateKey, body []byte) map[string]string {
		ts := strconv.FormatInt(now.Unix(), 10)
		return map[string]string{signature.HeaderDiscordTimestamp: ts, signature.HeaderDiscordSignature: signature.SignDiscord(k, ts, body)}
	}

	// A PING is answered with a PONG, not stored; a forged one (Discord's
	// own security check sends some) is refused.
	ping := []byte(`{"id":"787053080478613555","token":"ThisIsATokenFromDiscordThatIsVeryLong","type":1,"version":1}`)
	a := h.postRaw(t, "discord", ping, sign(key, ping))
	if a.status != 200 || a.body != `{"type":1}` || a.ctype != "application/json" {
		t.Fatalf("ping: %+v", a)
	}
	if a = h.postRaw(t, "discord", ping, sign(other, ping)); a.status != 401 {
		t.Fatalf("forged ping: %+v", a)
	}
	if n := h.count(t); n != 0 {
		t.Fatalf("%d events stored by a ping", n)
	}

	// An interaction: ID its id, type its type.
	cmd := []byte(`{"id":"787053080478613556","token":"ThisIsATokenFromDiscordThatIsVeryLong","type":2,"version":1,"data":{"id":"787053080478613554","name":"test"}}`)
	status, id, typ := h.postRaw(t, "discord", cmd, sign(key, cmd)).event(t)
	if status != OutcomeAccepted || id != "787053080478613556" || typ != "2" {
		t.Fatalf("command: %s %s %s", status, id, typ)
	}
	// A nested "type":1 is not a PING.
	nested := []byte(`{"id":"7","type":3,"data":{"type":1}}`)
	if status, _, typ = h.postRaw(t, "discord", nested, sign(key, nested)).event(t); status != OutcomeAccepted || typ != "3" {
		t.Fatalf("component: %s %s", status, typ)
	}
	if n := h.handshakes("discord"); n != 1 {
		t.Fatalf("handshakes counted %v, want 1", n)
	}
}

// In cluster mode a Slack retry reaching another gateway is a duplicate
// there, and a url_verification is answered by any gateway, stored by none.
func TestSlackPresetInCluster(t *testing.T) {
	srv := gatewaytest.RunNATS(t, 0, t.TempDir())
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1700000000, 0)
	gateway := func(name string) *harness {
		c, err := cluster.New(cluster.Config{Gateway: name, TTL: time.Hour,
			JetStream: func() natsjs.JetStream { return js }})
		if err != nil {
			t.Fatal(err)
		}
		h := newHarnessFor(t, []Source{{Name: "slack", Verify: "slack", Secrets: []string{slackSecret}}},
			Options{Cluster: c, ClusterTimeout: 5 * time.Second})
		h.setNow(now)
		return h
	}
	a, b := gateway("gw-a"), gateway("gw-b")

	verify := []byte(`{"type":"url_verification","challenge":"c-1"}`)
	for _, h := range []*harness{a, b} {
		if got := h.postRaw(t, "slack", verify, slackHeaders(slackSecret, now, verify)); got.status != 200 || got.body != "c-1" {
			t.Fatalf("url_verification: %+v", got)
		}
	}
	ev := []byte(`{"type":"event_callback","event_id":"Ev1","event":{"type":"message"}}`)
	if status, _, _ := a.postRaw(t, "slack", ev, slackHeaders(slackSecret, now, ev)).event(t); status != OutcomeAccepted {
		t.Fatalf("first at a: %s", status)
	}
	retry := slackHeaders(slackSecret, now, ev)
	retry["X-Slack-Retry-Num"] = "1"
	if status, _, _ := b.postRaw(t, "slack", ev, retry).event(t); status != OutcomeDuplicate {
		t.Fatalf("retry at b: %s, want duplicate", status)
	}
	if na, nb := a.count(t), b.count(t); na != 1 || nb != 1 {
		t.Fatalf("stored %d at a, %d at b; want the event once at each (the copy at b held by a), no handshake", na, nb)
	}
}
