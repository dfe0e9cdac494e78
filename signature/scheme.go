package signature

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"
)

// Scheme is one verify scheme, a provider preset: the data a source of it
// needs and the verifier it runs. Each scheme declares itself with
// Register from an init function in its own file; config validation,
// config defaults and the inbound handler all read the registry.
type Scheme struct {
	// Name is the value of a source's verify key.
	Name string
	// ID and Type are where the scheme's events carry their ID and type
	// when the source names neither a header nor a field for them. A zero
	// ID means the source must name one; a zero Type leaves the type empty.
	ID, Type Location
	// Unsigned schemes take no secrets (none); others require at least one.
	Unsigned bool
	// CheckSecret, if set, reports why a secret has the wrong form for the
	// scheme. Its error must not contain the secret.
	CheckSecret func(secret string) error
	// KeepHeaders are stored with each event besides its ID and type
	// headers, e.g. a signed timestamp. Never a signature.
	KeepHeaders []string
	// New builds the scheme's verifier.
	New func(Params) (Verifier, error)
	// Handshake, if set, answers the requests by which the provider checks
	// the endpoint (a challenge, a ping). See Handshake.
	Handshake Handshake
	// Tolerance, if set, is the scheme's default tolerance of signed
	// timestamps, in place of 5m (the provider documents another).
	Tolerance time.Duration
}

// Location is where an event carries a value: a request header, or a
// dot-separated JSON field path ("data.id"). At most one is set.
type Location struct {
	Header, Field string
	// Fallback, only with Field and only for the type, is a field looked
	// up when Field's value is absent or empty.
	Fallback string
}

// Params are a source's settings a verifier is built from.
type Params struct {
	// Secrets are tried in turn (rotation).
	Secrets []string
	// Tolerance is the allowed clock skew of signed timestamps (> 0).
	Tolerance time.Duration
	// HMAC configures the generic hmac scheme.
	HMAC HMACOptions
}

// Handshake is called for each request whose signature verified, before
// the event is identified, deduplicated or stored. If the request is the
// provider checking the endpoint, it returns the answer and true: the
// request is answered so and not stored. Otherwise it returns false and
// the request is an event. body is the raw body, already within the
// source's size limit.
type Handshake func(h Header, body []byte) (Answer, bool)

// Answer is a handshake's answer.
type Answer struct {
	// Status is the HTTP status. Default 200.
	Status int
	// ContentType is the answer's Content-Type. Default
	// "text/plain; charset=utf-8".
	ContentType string
	// Body is the answer's body; it may alias the request body (the caller
	// copies it).
	Body []byte
}

var registry = struct {
	sync.RWMutex
	schemes map[string]Scheme
}{schemes: map[string]Scheme{}}

// Register adds s to the schemes. It is meant for init functions and
// panics if s has no name or no New, or if the name is taken.
func Register(s Scheme) {
	if s.Name == "" || s.New == nil {
		panic("signature: register: a scheme needs a name and a New")
	}
	if s.ID.Header != "" && s.ID.Field != "" || s.Type.Header != "" && s.Type.Field != "" {
		panic(fmt.Sprintf("signature: register %s: a location is a header or a field, not both", s.Name))
	}
	if s.ID.Fallback != "" || s.Type.Fallback != "" && s.Type.Field == "" {
		panic(fmt.Sprintf("signature: register %s: a fallback is only for a type field", s.Name))
	}
	registry.Lock()
	defer registry.Unlock()
	if _, ok := registry.schemes[s.Name]; ok {
		panic(fmt.Sprintf("signature: register %s: name taken", s.Name))
	}
	s.KeepHeaders = slices.Clone(s.KeepHeaders)
	registry.schemes[s.Name] = s
}

// Lookup returns the scheme named name.
func Lookup(name string) (Scheme, bool) {
	registry.RLock()
	defer registry.RUnlock()
	s, ok := registry.schemes[name]
	if ok {
		s.KeepHeaders = slices.Clone(s.KeepHeaders)
	}
	return s, ok
}

// Names lists the registered schemes' names, sorted.
func Names() []string {
	registry.RLock()
	defer registry.RUnlock()
	names := make([]string, 0, len(registry.schemes))
	for n := range registry.schemes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// NewVerifier builds the verifier of the scheme named name.
func NewVerifier(name string, p Params) (Verifier, error) {
	s, ok := Lookup(name)
	if !ok {
		return nil, fmt.Errorf("unknown verify scheme %q", name)
	}
	return s.New(p)
}
