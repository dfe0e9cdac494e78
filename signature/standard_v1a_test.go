package signature

import (
	"crypto/ed25519"
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The v1a (ed25519) vector of the Svix server, the reference sender of
// Standard Webhooks: svix/svix-webhooks server/svix-server/src/worker.rs,
// test_asymmetric_key_signing. The key is seed || public key; the
// signature is the one in the Standard Webhooks specification's example
// headers (spec/standard-webhooks.md, "Webhook headers").
const (
	v1aKeypair = "6Xb/dCcHpPea21PS1N9VY/NZW723CEc77N4rJCubMbfVKIDij2HKpMKkioLlX0dRqSKJp4AJ6p9lMicMFs6Kvg=="
	v1aPublic  = "whpk_1SiA4o9hyqTCpIqC5V9HUakiiaeACeqfZTInDBbOir4="
	v1aSig     = "v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw/enGzPCXe5BdqzCInXqYXFymVJaA7AZdpXwVLPo3mNl8EM+m7TBAg=="
)

// v1aPrivate is the vector's private key.
func v1aPrivate(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	kp, err := base64.StdEncoding.DecodeString(v1aKeypair)
	if err != nil || len(kp) != 64 {
		t.Fatalf("keypair: %v", err)
	}
	priv := ed25519.NewKeyFromSeed(kp[:32])
	if "whpk_"+base64.StdEncoding.EncodeToString(priv.Public().(ed25519.PublicKey)) != v1aPublic {
		t.Fatal("the vector's public key is not its keypair's")
	}
	return priv
}

// signV1a is a v1a entry over id.ts.body.
func signV1a(priv ed25519.PrivateKey, id string, ts int64, body string) string {
	return "v1a," + base64.StdEncoding.EncodeToString(ed25519.Sign(priv, []byte(id+"."+strconv.FormatInt(ts, 10)+"."+body)))
}

func TestStandardV1aVector(t *testing.T) {
	t.Parallel()
	if got := signV1a(v1aPrivate(t), vecID, vecTS, vecBody); got != v1aSig {
		t.Fatalf("signing the vector: %s, want %s", got, v1aSig)
	}
	v, err := NewStandard([]string{v1aPublic}, 5*time.Minute)
	if err != nil {
		t.Fatalf("NewStandard(whpk_) = %v", err)
	}
	h := hdr("webhook-id", vecID, "webhook-timestamp", strconv.Itoa(vecTS), "webhook-signature", v1aSig)
	if err := v.Verify(h, []byte(vecBody), unix(vecTS)); err != nil {
		t.Fatalf("Verify(v1a vector) = %v", err)
	}
	// The specification's example header carries a v1 and the v1a entry.
	h = hdr("webhook-id", vecID, "webhook-timestamp", strconv.Itoa(vecTS), "webhook-signature", vecSig+" "+v1aSig)
	for _, secrets := range [][]string{{v1aPublic}, {vecSecret}, {vecSecret, v1aPublic}, {stdSecretB, v1aPublic}} {
		v, err := NewStandard(secrets, 5*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Verify(h, []byte(vecBody), unix(vecTS)); err != nil {
			t.Fatalf("secrets %d: Verify(v1 and v1a) = %v", len(secrets), err)
		}
	}
}

func TestStandardV1a(t *testing.T) {
	t.Parallel()
	v1aPrivate(t) // checks the vector
	other := ed25519.NewKeyFromSeed(make([]byte, 32))
	otherPub := "whpk_" + base64.StdEncoding.EncodeToString(other.Public().(ed25519.PublicKey))
	const now = vecTS
	ts := strconv.Itoa(now)
	good := v1aSig
	goodB64 := strings.TrimPrefix(good, "v1a,")
	tests := []struct {
		name    string
		secrets []string
		s, body string
		now     int64
		want    error
	}{
		{"valid", []string{v1aPublic}, good, vecBody, now, nil},
		{"rotated key second matches", []string{otherPub, v1aPublic}, good, vecBody, now, nil},
		{"rotation: two entries", []string{v1aPublic}, signV1a(other, vecID, now, vecBody) + " " + good, vecBody, now, nil},
		{"exactly tolerance old", []string{v1aPublic}, good, vecBody, now + 300, nil},

		{"wrong key", []string{otherPub}, good, vecBody, now, ErrMismatch},
		{"tampered body", []string{v1aPublic}, good, vecBody + " ", now, ErrMismatch},
		{"v1a digest under v1", []string{v1aPublic}, "v1," + goodB64, vecBody, now, ErrMismatch},
		{"v1 only with a public key", []string{v1aPublic}, vecSig, vecBody, now, ErrMismatch},
		{"v1a with only an hmac secret", []string{vecSecret}, good, vecBody, now, ErrMismatch},
		{"v1a unpadded", []string{v1aPublic}, strings.TrimRight(good, "="), vecBody, now, ErrMismatch},
		{"v1a wrong length", []string{v1aPublic}, "v1a," + base64.StdEncoding.EncodeToString(make([]byte, 63)), vecBody, now, ErrMismatch},
		{"forged and stale is mismatch", []string{otherPub}, good, vecBody, now + 3600, ErrMismatch},
		{"fourth v1a checked", []string{v1aPublic}, strings.Repeat(signV1a(other, vecID, now, vecBody)+" ", 3) + good, vecBody, now, nil},
		{"v1a past the fourth", []string{v1aPublic}, strings.Repeat(signV1a(other, vecID, now, vecBody)+" ", 4) + good, vecBody, now, ErrMismatch},

		{"stale", []string{v1aPublic}, good, vecBody, now + 301, ErrTimestamp},
		{"future", []string{v1aPublic}, good, vecBody, now - 301, ErrTimestamp},
		{"no entry", []string{v1aPublic}, goodB64, vecBody, now, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := NewStandard(tt.secrets, 5*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			h := hdr("webhook-id", vecID, "webhook-timestamp", ts, "webhook-signature", tt.s)
			checkErr(t, v.Verify(h, []byte(tt.body), unix(tt.now)), tt.want, tt.secrets...)
		})
	}
}

func TestStandardPublicKeyRefused(t *testing.T) {
	t.Parallel()
	if _, err := NewStandard([]string{"whpk_"}, time.Minute); err == nil {
		t.Error("NewStandard(whpk_) accepted")
	}
	for _, k := range []string{
		"whpk_AAAA", "whpk_" + strings.TrimRight(strings.TrimPrefix(v1aPublic, "whpk_"), "="),
		"whpk_" + base64.StdEncoding.EncodeToString(make([]byte, 64)), "whsk_" + v1aKeypair,
	} {
		if _, err := NewStandard([]string{k}, time.Minute); err == nil {
			t.Errorf("NewStandard(%.12s...) accepted", k)
		} else {
			checkMsg(t, err.Error(), k)
		}
		if err := CheckStandardSecret(k); err == nil {
			t.Errorf("CheckStandardSecret(%.12s...) accepted", k)
		} else {
			checkMsg(t, err.Error(), k)
		}
	}
	if err := CheckStandardSecret(v1aPublic); err != nil {
		t.Errorf("CheckStandardSecret(public key) = %v", err)
	}
	if err := CheckStandardSecret(vecSecret); err != nil {
		t.Errorf("CheckStandardSecret(secret) = %v", err)
	}
}

// FuzzStandardV1a: parsing the v1a entries of a webhook-signature never
// panics; each accepted signature is present verbatim in its canonical
// encoding, and there are no more than v1a entries.
func FuzzStandardV1a(f *testing.F) {
	for _, s := range []string{
		v1aSig, vecSig + " " + v1aSig, "", " ", "v1a", "v1a,", v1aSig[:40], strings.TrimRight(v1aSig, "="),
		"\tv1a,AAAA\t" + v1aSig, "v1a," + v1aSig, v1aSig + "\n", strings.Replace(v1aSig, "+", "-", 1),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		sigs := parseStandardV1a(header, nil)
		if len(sigs) > maxStandardV1a {
			t.Fatalf("%d signatures kept", len(sigs))
		}
		if n := strings.Count(header, "v1a,"); len(sigs) > n {
			t.Fatalf("%d signatures from %d v1a entries", len(sigs), n)
		}
		for _, s := range sigs {
			if !strings.Contains(header, "v1a,"+base64.StdEncoding.EncodeToString(s[:])) {
				t.Fatalf("accepted a non-canonical v1a in %q", header)
			}
		}
		// The v1 parser sees the same entries: a header with a v1a has one.
		if len(sigs) > 0 {
			if _, err := parseStandardSignatures(header, nil); err != nil {
				t.Fatalf("v1a entries but parseStandardSignatures = %v", err)
			}
		}
	})
}
