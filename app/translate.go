package app

import (
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/inbound"
	"github.com/hookgate/hookgate/signature"
)

// The functions below translate the loaded file (package config) into each
// package's own runtime Config. They only copy: config.Load has applied
// the defaults and validated the values. Secrets leave config's masking
// types here; the runtime types that hold them mask them when printed.

// inboundSources are the sources the inbound handler serves.
func inboundSources(cs []config.Source) []inbound.Source {
	out := make([]inbound.Source, len(cs))
	for i, c := range cs {
		out[i] = inbound.Source{
			Name:      c.Name,
			Verify:    c.Verify,
			Secrets:   c.Secrets.Reveal(),
			Tolerance: c.Tolerance,
			MaxBody:   c.MaxBody,
			HMAC: signature.HMACOptions{
				Header: c.HMAC.Header, Prefix: c.HMAC.Prefix,
				Algorithm: c.HMAC.Algorithm, Encoding: c.HMAC.Encoding,
			},
			IDHeader:   c.IDHeader,
			IDField:    c.IDField,
			TypeHeader: c.TypeHeader,
			TypeField:  c.TypeField,
		}
	}
	return out
}
