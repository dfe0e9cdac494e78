package signature

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// hdr builds a case-insensitive Header from name/value pairs.
func hdr(kv ...string) Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h.Get
}

var sentinels = []error{ErrMissing, ErrMalformed, ErrMismatch, ErrTimestamp}

// checkErr reports a failure unless got matches want (nil or a sentinel),
// wraps exactly one sentinel, and has a clean message.
func checkErr(t *testing.T, got, want error, secrets ...string) {
	t.Helper()
	if want == nil {
		if got != nil {
			t.Fatalf("err = %v, want nil", got)
		}
		return
	}
	if !errors.Is(got, want) {
		t.Fatalf("err = %v, want %v", got, want)
	}
	n := 0
	for _, s := range sentinels {
		if errors.Is(got, s) {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("err %v wraps %d sentinels, want 1", got, n)
	}
	checkMsg(t, got.Error(), secrets...)
}

// checkMsg fails if msg is not lowercase or contains a secret.
func checkMsg(t *testing.T, msg string, secrets ...string) {
	t.Helper()
	if msg != strings.ToLower(msg) {
		t.Errorf("message %q is not lowercase", msg)
	}
	for _, s := range secrets {
		if s != "" && strings.Contains(msg, s) {
			t.Errorf("message %q contains a secret", msg)
		}
	}
}

// isSentinel reports whether err wraps exactly one sentinel.
func isSentinel(err error) bool {
	n := 0
	for _, s := range sentinels {
		if errors.Is(err, s) {
			n++
		}
	}
	return n == 1
}

// encodeSignature is the inverse of decodeSignature (hex in lower case).
func encodeSignature(sig []byte, prefix string, b64 bool) string {
	if b64 {
		return prefix + base64.StdEncoding.EncodeToString(sig)
	}
	return prefix + hex.EncodeToString(sig)
}

func unix(sec int64) time.Time { return time.Unix(sec, 0) }
