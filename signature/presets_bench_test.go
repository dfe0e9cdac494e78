package signature

import (
	"crypto/ed25519"
	"encoding/hex"
	"testing"
	"time"
)

func BenchmarkVerifySlack(b *testing.B) {
	v, err := NewSlack([]string{slackDocSecret}, 5*time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	h := mapHeader(map[string]string{
		HeaderSlackSignature: SignSlack(slackDocSecret, 1700000000, benchBody), HeaderSlackTimestamp: "1700000000",
	})
	benchVerify(b, v, h, unix(1700000000))
}

func BenchmarkVerifyTwitch(b *testing.B) {
	v, err := NewTwitch([]string{twitchDocSecret}, DefaultTwitchTolerance)
	if err != nil {
		b.Fatal(err)
	}
	sent, _ := time.Parse(time.RFC3339Nano, twitchDocTimestamp)
	h := mapHeader(map[string]string{
		HeaderTwitchMessageSignature: SignTwitch(twitchDocSecret, twitchDocID, twitchDocTimestamp, benchBody),
		HeaderTwitchMessageID:        twitchDocID, HeaderTwitchMessageTimestamp: twitchDocTimestamp,
	})
	benchVerify(b, v, h, sent)
}

func BenchmarkVerifyDiscord(b *testing.B) {
	seed, _ := hex.DecodeString(discordRFCSeed)
	v, err := NewDiscord([]string{discordRFCPublic}, 5*time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	h := mapHeader(map[string]string{
		HeaderDiscordSignature: SignDiscord(ed25519.NewKeyFromSeed(seed), discordDocTS, benchBody), HeaderDiscordTimestamp: discordDocTS,
	})
	benchVerify(b, v, h, unix(1700000000))
}
