package signature

import (
	"slices"
	"testing"
	"time"
)

func TestRegistry(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"github", "hmac", "none", "standard", "stripe"} {
		if !slices.Contains(Names(), name) {
			t.Errorf("scheme %s is not registered", name)
		}
	}
	if !slices.IsSorted(Names()) {
		t.Errorf("Names() = %v, not sorted", Names())
	}
	cases := []struct {
		name     string
		id, typ  Location
		unsigned bool
	}{
		{"stripe", Location{Field: "id"}, Location{Field: "type"}, false},
		{"standard", Location{Header: "webhook-id"}, Location{Field: "type"}, false},
		{"github", Location{Header: "X-GitHub-Delivery"}, Location{Header: "X-GitHub-Event"}, false},
		{"hmac", Location{}, Location{}, false},
		{"none", Location{}, Location{}, true},
	}
	for _, c := range cases {
		s, ok := Lookup(c.name)
		if !ok || s.ID != c.id || s.Type != c.typ || s.Unsigned != c.unsigned {
			t.Errorf("%s: %+v", c.name, s)
		}
	}
	if _, ok := Lookup("rot13"); ok {
		t.Error("rot13 is registered")
	}
	if _, err := NewVerifier("rot13", Params{}); err == nil {
		t.Error("NewVerifier(rot13) succeeded")
	}
	v, err := NewVerifier("stripe", Params{Secrets: []string{"s"}, Tolerance: time.Minute})
	if _, ok := v.(*Stripe); !ok || err != nil {
		t.Errorf("NewVerifier(stripe) = %T, %v", v, err)
	}
	// A lookup's KeepHeaders is the caller's own.
	s, _ := Lookup("standard")
	s.KeepHeaders[0] = "x"
	if s, _ = Lookup("standard"); s.KeepHeaders[0] != "webhook-timestamp" {
		t.Errorf("KeepHeaders changed through a lookup: %v", s.KeepHeaders)
	}
}

func TestRegisterRefuses(t *testing.T) {
	t.Parallel()
	mustPanic := func(what string, s Scheme) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s: Register did not panic", what)
			}
		}()
		Register(s)
	}
	newNone := func(Params) (Verifier, error) { return None{}, nil }
	mustPanic("taken", Scheme{Name: "stripe", New: newNone})
	mustPanic("no name", Scheme{New: newNone})
	mustPanic("no New", Scheme{Name: "test-no-new"})
	mustPanic("header and field", Scheme{Name: "test-both", New: newNone, ID: Location{Header: "a", Field: "b"}})
}
