package cluster

import (
	"strings"
	"testing"
	"unicode/utf8"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

func TestWatchBehind(t *testing.T) {
	for _, c := range []struct {
		name               string
		seen, last, behind uint64
		wantBehind         uint64
		wantErr            bool
	}{
		{"caught up", 7, 7, 0, 0, false},
		{"a change on its way", 7, 8, 0, 8, false},
		{"read since the previous check", 8, 9, 8, 9, false},
		{"caught up since", 9, 9, 8, 0, false},
		{"not read since the previous check", 7, 8, 8, 0, true},
		{"not read, more written", 7, 9, 8, 0, true},
		{"a bucket made anew", 7, 2, 0, 0, true},
	} {
		got, err := watchBehind(c.seen, c.last, c.behind)
		if got != c.wantBehind || (err != nil) != c.wantErr {
			t.Errorf("%s: watchBehind(%d, %d, %d) = %d, %v; want %d, error %v", c.name, c.seen, c.last, c.behind, got, err, c.wantBehind, c.wantErr)
		}
	}
}

// A pause entry from the bucket (written by any client of the NATS
// cluster) is read within its bounds, or refused; never a panic.
func FuzzDecodePause(f *testing.F) {
	f.Add("billing", uint8(natsjs.KeyValuePut), []byte(`{"paused":true,"gateway":"host-0a1b2c3d","at":"2026-11-26T07:00:00Z"}`))
	f.Add("billing", uint8(natsjs.KeyValuePut), []byte(`{"paused":false}`))
	f.Add("tasks", uint8(natsjs.KeyValueDelete), []byte{})
	f.Add("Billing.x", uint8(natsjs.KeyValuePut), []byte(`{"paused":true}`))
	f.Add("r", uint8(natsjs.KeyValuePut), []byte(`{"paused":"yes"}`))
	f.Add("r", uint8(natsjs.KeyValuePut), []byte(`{"gateway":"\xff\xfe`+strings.Repeat("g", 200)+`"}`))
	f.Fuzz(func(t *testing.T, key string, op uint8, value []byte) {
		paused, gateway, err := decodePause(key, natsjs.KeyValueOp(op), value)
		if err != nil {
			if paused || gateway != "" {
				t.Fatalf("refused, yet paused %v by %q", paused, gateway)
			}
			return
		}
		if !pauseKeyPattern.MatchString(key) {
			t.Fatalf("key %q taken for a route", key)
		}
		if len(gateway) > 128 || !utf8.ValidString(gateway) {
			t.Fatalf("gateway %q: unbounded or not UTF-8", gateway)
		}
		if len(value) > maxPauseEntry && natsjs.KeyValueOp(op) == natsjs.KeyValuePut && paused {
			t.Fatalf("a value of %d bytes read", len(value))
		}
	})
}
