package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"strings"
	"testing"
	"time"
)

// GitHub's documented test vector.
const (
	ghSecret = "It's a Secret to Everybody"
	ghBody   = "Hello, World!"
	ghSig    = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
)

func TestGitHub(t *testing.T) {
	t.Parallel()
	body := []byte(ghBody)
	other := "sha256=" + hex.EncodeToString(hmacSum(sha256.New, "another secret", body))
	tests := []struct {
		name    string
		secrets []string
		header  string
		body    []byte
		want    error
	}{
		{"vector", []string{ghSecret}, ghSig, body, nil},
		{"uppercase hex", []string{ghSecret}, "sha256=" + strings.ToUpper(strings.TrimPrefix(ghSig, "sha256=")), body, nil},
		{"rotated secret second matches", []string{"another secret", ghSecret}, ghSig, body, nil},
		{"wrong secret", []string{"another secret"}, ghSig, body, ErrMismatch},
		{"tampered body", []string{ghSecret}, ghSig, []byte(ghBody + "\n"), ErrMismatch},
		{"other secret's signature", []string{ghSecret}, other, body, ErrMismatch},
		{"missing", []string{ghSecret}, "", body, ErrMissing},
		{"no prefix", []string{ghSecret}, strings.TrimPrefix(ghSig, "sha256="), body, ErrMalformed},
		{"sha1 prefix", []string{ghSecret}, "sha1=" + strings.TrimPrefix(ghSig, "sha256="), body, ErrMalformed},
		{"prefix case", []string{ghSecret}, "SHA256=" + strings.TrimPrefix(ghSig, "sha256="), body, ErrMalformed},
		{"not hex", []string{ghSecret}, "sha256=" + strings.Repeat("g", 64), body, ErrMalformed},
		{"truncated", []string{ghSecret}, ghSig[:len(ghSig)-2], body, ErrMalformed},
		{"too long", []string{ghSecret}, ghSig + "00", body, ErrMalformed},
		{"two signatures", []string{ghSecret}, ghSig + "," + other, body, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := NewGitHub(tt.secrets)
			if err != nil {
				t.Fatal(err)
			}
			h := hdr()
			if tt.header != "" {
				h = hdr("x-hub-signature-256", tt.header)
			}
			got := v.Verify(h, tt.body, time.Time{})
			checkErr(t, got, tt.want, append(tt.secrets, strings.TrimPrefix(ghSig, "sha256="))...)
		})
	}
}

func hmacSum(newHash func() hash.Hash, secret string, body []byte) []byte {
	m := hmac.New(newHash, []byte(secret))
	m.Write(body)
	return m.Sum(nil)
}

func TestHMAC(t *testing.T) {
	t.Parallel()
	body := []byte(`{"event":"ping"}`)
	const secret, secret2 = "s3cr3t", "rotated"
	s256 := hmacSum(sha256.New, secret, body)
	s512 := hmacSum(sha512.New, secret, body)
	b512 := base64.StdEncoding.EncodeToString(s512)

	tests := []struct {
		name    string
		secrets []string
		o       HMACOptions
		header  string
		body    []byte
		want    error
	}{
		{"sha256 hex default", []string{secret}, HMACOptions{Header: "X-Signature"}, hex.EncodeToString(s256), body, nil},
		{"sha256 hex prefix", []string{secret}, HMACOptions{Header: "X-Signature", Prefix: "sha256="}, "sha256=" + hex.EncodeToString(s256), body, nil},
		{"sha512 base64", []string{secret}, HMACOptions{Header: "X-Sig", Algorithm: "sha512", Encoding: "base64"}, b512, body, nil},
		{"sha512 base64 prefix", []string{secret}, HMACOptions{Header: "X-Sig", Prefix: "v0:", Algorithm: "SHA512", Encoding: "Base64"}, "v0:" + b512, body, nil},
		{"base64 sha256", []string{secret}, HMACOptions{Header: "X-Sig", Encoding: "base64"}, base64.StdEncoding.EncodeToString(s256), body, nil},
		{"rotated secret second matches", []string{secret2, secret}, HMACOptions{Header: "X-Sig"}, hex.EncodeToString(s256), body, nil},

		{"wrong secret", []string{secret2}, HMACOptions{Header: "X-Sig"}, hex.EncodeToString(s256), body, ErrMismatch},
		{"tampered body", []string{secret}, HMACOptions{Header: "X-Sig"}, hex.EncodeToString(s256), []byte("x"), ErrMismatch},
		{"sha256 sent sha512 configured", []string{secret}, HMACOptions{Header: "X-Sig", Algorithm: "sha512"}, hex.EncodeToString(s256), body, ErrMalformed},
		{"missing", []string{secret}, HMACOptions{Header: "X-Sig"}, "", body, ErrMissing},
		{"prefix absent", []string{secret}, HMACOptions{Header: "X-Sig", Prefix: "sha256="}, hex.EncodeToString(s256), body, ErrMalformed},
		{"hex when base64 configured", []string{secret}, HMACOptions{Header: "X-Sig", Encoding: "base64", Algorithm: "sha512"}, hex.EncodeToString(s512), body, ErrMalformed},
		{"base64 unpadded", []string{secret}, HMACOptions{Header: "X-Sig", Encoding: "base64"}, strings.TrimRight(base64.StdEncoding.EncodeToString(s256), "="), body, ErrMalformed},
		{"base64 url alphabet", []string{secret}, HMACOptions{Header: "X-Sig", Encoding: "base64", Algorithm: "sha512"}, base64.URLEncoding.EncodeToString(s512), body, ErrMalformed},
		{"base64 with newline", []string{secret}, HMACOptions{Header: "X-Sig", Encoding: "base64"}, base64.StdEncoding.EncodeToString(s256)[:40] + "\n===", body, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := NewHMAC(tt.secrets, tt.o)
			if err != nil {
				t.Fatal(err)
			}
			h := hdr()
			if tt.header != "" {
				h = func(name string) string {
					if strings.EqualFold(name, tt.o.Header) {
						return tt.header
					}
					return ""
				}
			}
			got := v.Verify(h, tt.body, time.Time{})
			checkErr(t, got, tt.want, append(tt.secrets, hex.EncodeToString(s256), b512)...)
		})
	}
}

func TestNewHMACErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		secrets []string
		o       HMACOptions
		want    string
	}{
		{"no header", []string{"s"}, HMACOptions{}, "header is required"},
		{"bad header", []string{"s"}, HMACOptions{Header: "X Sig"}, "not a valid header name"},
		{"header with colon", []string{"s"}, HMACOptions{Header: "X-Sig:"}, "not a valid header name"},
		{"bad algorithm", []string{"s"}, HMACOptions{Header: "X-Sig", Algorithm: "md5"}, `unknown algorithm "md5"`},
		{"bad encoding", []string{"s"}, HMACOptions{Header: "X-Sig", Encoding: "base32"}, `unknown encoding "base32"`},
		{"no secrets", nil, HMACOptions{Header: "X-Sig"}, "no secrets"},
		{"empty secret", []string{"s", ""}, HMACOptions{Header: "X-Sig"}, "secrets[1]: empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewHMAC(tt.secrets, tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want mention of %q", err, tt.want)
			}
		})
	}
	if _, err := NewGitHub(nil); err == nil {
		t.Error("NewGitHub(nil) succeeded")
	}
	if _, err := NewGitHub([]string{""}); err == nil || !strings.Contains(err.Error(), "secrets[0]") {
		t.Errorf("NewGitHub([\"\"]) = %v", err)
	}
}

func TestNone(t *testing.T) {
	t.Parallel()
	var v Verifier = None{}
	if err := v.Verify(hdr(), nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentVerify(t *testing.T) {
	t.Parallel()
	v, err := NewGitHub([]string{"x", ghSecret})
	if err != nil {
		t.Fatal(err)
	}
	h := hdr("X-Hub-Signature-256", ghSig)
	done := make(chan error)
	for range 8 {
		go func() {
			var err error
			for range 200 {
				if err = v.Verify(h, []byte(ghBody), time.Time{}); err != nil {
					break
				}
			}
			done <- err
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
