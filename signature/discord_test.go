package signature

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"strings"
	"testing"
	"time"
)

// A PING and an APPLICATION_COMMAND as discord-interactions-js's tests
// send them (src/__tests__/utils/SharedTestUtils.ts), signed over timestamp
// + body as its signRequestWithKeyPair does, with WebCrypto Ed25519 (Node's
// crypto.subtle.sign) and the key of RFC 8032 section 7.1, test 1.
const (
	discordRFCSeed   = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"
	discordRFCPublic = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
	discordDocTS     = "1700000000"
	discordPingBody  = `{"id":"787053080478613555","token":"ThisIsATokenFromDiscordThatIsVeryLong","type":1,"version":1}`
	discordPingSig   = "f0bd878adcef1f6d475c9644421905bd02b5de38e0d3ecfc6f58a711962c69ccc8dd7c9db312f9bdf08b1e1b8182e27a844da728c5e0dbb5507bf9931c1ed80b"
	discordCmdBody   = `{"id":"787053080478613556","token":"ThisIsATokenFromDiscordThatIsVeryLong","type":2,"version":1,"data":{"id":"787053080478613554","name":"test"}}`
	discordCmdSig    = "4cbcce90ca257785667295862f258f4920233243b91c2694b14b52d9689c2a5c8dbb476e87eea64cbe841f6ced59e19beb307e4d38b21fccdb4a825be6aeb908"
)

func discordHdr(sig, ts string) Header {
	var kv []string
	if sig != "" {
		kv = append(kv, HeaderDiscordSignature, sig)
	}
	if ts != "" {
		kv = append(kv, HeaderDiscordTimestamp, ts)
	}
	return hdr(kv...)
}

func discordRFCKey(t testing.TB) ed25519.PrivateKey {
	seed, err := hex.DecodeString(discordRFCSeed)
	if err != nil {
		t.Fatal(err)
	}
	return ed25519.NewKeyFromSeed(seed)
}

func TestDiscordSDKVector(t *testing.T) {
	t.Parallel()
	key := discordRFCKey(t)
	if got := hex.EncodeToString(key.Public().(ed25519.PublicKey)); got != discordRFCPublic {
		t.Fatalf("public key %s, want RFC 8032's %s", got, discordRFCPublic)
	}
	if got := SignDiscord(key, discordDocTS, []byte(discordPingBody)); got != discordPingSig {
		t.Fatalf("SignDiscord = %s, want %s", got, discordPingSig)
	}
	v, err := NewDiscord([]string{discordRFCPublic}, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	checkErr(t, v.Verify(discordHdr(discordPingSig, discordDocTS), []byte(discordPingBody), unix(1700000000)), nil)
	checkErr(t, v.Verify(discordHdr(discordCmdSig, discordDocTS), []byte(discordCmdBody), unix(1700000000)), nil)
	checkErr(t, v.Verify(discordHdr(discordPingSig, discordDocTS), []byte(discordCmdBody), unix(1700000000)), ErrMismatch)
}

func TestDiscord(t *testing.T) {
	t.Parallel()
	const now = 1700000000
	key := discordRFCKey(t)
	_, otherKey, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	otherPublic := hex.EncodeToString(otherKey.Public().(ed25519.PublicKey))
	body := []byte(discordCmdBody)
	ts := "1700000000"
	good := SignDiscord(key, ts, body)
	other := SignDiscord(otherKey, ts, body)
	tests := []struct {
		name    string
		keys    []string
		sig, ts string
		body    []byte
		now     int64
		want    error
	}{
		{"valid", []string{discordRFCPublic}, good, ts, body, now, nil},
		{"rotated key second matches", []string{otherPublic, discordRFCPublic}, good, ts, body, now, nil},
		{"uppercase hex", []string{discordRFCPublic}, strings.ToUpper(good), ts, body, now, nil},
		{"uppercase key", []string{strings.ToUpper(discordRFCPublic)}, good, ts, body, now, nil},
		{"exactly tolerance old", []string{discordRFCPublic}, good, ts, body, now + 300, nil},

		{"other key", []string{discordRFCPublic}, other, ts, body, now, ErrMismatch},
		{"tampered body", []string{discordRFCPublic}, good, ts, append(bytes.Clone(body), ' '), now, ErrMismatch},
		{"tampered timestamp", []string{discordRFCPublic}, good, "1700000001", body, now, ErrMismatch},
		{"truncated", []string{discordRFCPublic}, good[:126], ts, body, now, ErrMismatch},
		{"not hex", []string{discordRFCPublic}, strings.Repeat("z", 128), ts, body, now, ErrMismatch},
		{"forged and stale is mismatch", []string{otherPublic}, good, ts, body, now + 3600, ErrMismatch},

		{"stale", []string{discordRFCPublic}, good, ts, body, now + 301, ErrTimestamp},
		{"future", []string{discordRFCPublic}, good, ts, body, now - 301, ErrTimestamp},

		{"missing signature", []string{discordRFCPublic}, "", ts, body, now, ErrMissing},
		{"missing timestamp", []string{discordRFCPublic}, good, "", body, now, ErrMissing},
		{"timestamp not a number", []string{discordRFCPublic}, good, "x", body, now, ErrMalformed},
		{"timestamp leading zero", []string{discordRFCPublic}, good, "01700000000", body, now, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, err := NewDiscord(tt.keys, 5*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			checkErr(t, v.Verify(discordHdr(tt.sig, tt.ts), tt.body, unix(tt.now)), tt.want, tt.keys...)
		})
	}
}

func TestNewDiscordRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		keys []string
		tol  time.Duration
	}{
		{"no keys", nil, time.Minute},
		{"empty key", []string{""}, time.Minute},
		{"short key", []string{discordRFCPublic[:62]}, time.Minute},
		{"not hex", []string{strings.Repeat("g", 64)}, time.Minute},
		{"zero tolerance", []string{discordRFCPublic}, 0},
	} {
		_, err := NewDiscord(tc.keys, tc.tol)
		if err == nil {
			t.Errorf("%s: NewDiscord accepted", tc.name)
			continue
		}
		checkMsg(t, err.Error(), tc.keys...)
	}
}

// FuzzDiscordHeaders: parsing never panics, errors wrap one sentinel, a
// parsed signature re-formats and parses back identically, and a signature
// by any key over any body Verify accepts with that key's hex.
func FuzzDiscordHeaders(f *testing.F) {
	seed, _ := hex.DecodeString(discordRFCSeed)
	f.Add(discordPingSig, discordDocTS, seed, []byte(discordPingBody))
	f.Add("", "", []byte{}, []byte(nil))
	f.Add(strings.ToUpper(discordCmdSig), "01700000000", []byte("short"), []byte("{}"))
	f.Add(discordPingSig[:127], "9223372036854775807", seed, []byte(`{"type":1}`))
	f.Fuzz(func(t *testing.T, sigHdr, tsHdr string, seed, body []byte) {
		if sig, err := parseDiscordSignature(sigHdr); err != nil {
			if !isSentinel(err) {
				t.Fatalf("parse signature: %v wraps no single sentinel", err)
			}
		} else if again, err := parseDiscordSignature(hex.EncodeToString(sig[:])); err != nil || again != sig {
			t.Fatalf("%q did not round-trip: %v", sigHdr, err)
		}
		if len(seed) != ed25519.SeedSize {
			return
		}
		key := ed25519.NewKeyFromSeed(seed)
		v, err := NewDiscord([]string{discordRFCPublic, hex.EncodeToString(key.Public().(ed25519.PublicKey))}, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Verify(discordHdr(SignDiscord(key, discordDocTS, body), discordDocTS), body, unix(1700000000)); err != nil {
			t.Fatalf("Verify(SignDiscord) = %v", err)
		}
		if !validHeaderValue(tsHdr) {
			return
		}
		if err := v.Verify(discordHdr(sigHdr, tsHdr), body, unix(1700000000)); err != nil && !isSentinel(err) {
			t.Fatalf("Verify: %v wraps no single sentinel", err)
		}
	})
}
