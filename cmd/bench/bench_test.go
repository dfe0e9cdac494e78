package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hookgate/hookgate/signature"
)

// The generated events are valid Stripe-shaped JSON of the asked size,
// the same for the same ID, and signed as the gateway verifies.
func TestEventsAreSignedStripeEvents(t *testing.T) {
	v, err := signature.NewStripe([]string{benchSecret}, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	w := &worker{mac: hmac.New(sha256.New, []byte(benchSecret))}
	for _, size := range []int{512, 1024, 4096} {
		body := appendEvent(nil, "evt_abc123", size)
		if len(body) != size {
			t.Errorf("size %d: body is %d bytes", size, len(body))
		}
		var ev struct{ ID, Type string }
		if err := json.Unmarshal(body, &ev); err != nil || ev.ID != "evt_abc123" || ev.Type == "" {
			t.Fatalf("body %s: %v %+v", body, err, ev)
		}
		if again := appendEvent(nil, "evt_abc123", size); string(again) != string(body) {
			t.Error("the same ID gave another body")
		}
		now := time.Now()
		sig := string(w.sign(nil, now.Unix(), body))
		if err := v.Verify(func(string) string { return sig }, body, now); err != nil {
			t.Errorf("signature refused: %v", err)
		}
	}
}

func TestNum(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 1234567.4: "1,234,567", -1500: "-1,500"} {
		if got := num(in); got != want {
			t.Errorf("num(%v) = %q, want %q", in, got, want)
		}
	}
}

// -random-ids: IDs of the asked shape, all distinct, not in sending order.
func TestRandomIDs(t *testing.T) {
	w := &worker{rng: rand.New(rand.NewPCG(1, 2))}
	seen := map[string]bool{}
	sorted := true
	prev := ""
	for range 1000 {
		id := w.randomID()
		if len(id) != 28 || id[:4] != "evt_" {
			t.Fatalf("randomID() = %q, want evt_ and 24 characters", id)
		}
		if seen[id] {
			t.Fatalf("randomID() repeated %q", id)
		}
		seen[id] = true
		sorted = sorted && id > prev
		prev = id
	}
	if sorted {
		t.Error("1,000 random IDs came in ascending order")
	}
}
