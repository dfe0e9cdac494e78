package signature

import (
	"fmt"
	"time"
)

// Svix's header names.
const (
	HeaderSvixID        = "Svix-Id"
	HeaderSvixTimestamp = "Svix-Timestamp"
	HeaderSvixSignature = "Svix-Signature"
)

var svixDialect = newStdDialect("Svix")

// NewSvix returns a verifier of Svix-signed senders (Clerk, Resend and
// others): Standard Webhooks signatures (see Standard; v1 and v1a) under the
// headers svix-id, svix-timestamp and svix-signature. Secrets are
// "whsec_<base64>", or "whpk_<base64>" public keys.
func NewSvix(secrets []string, tolerance time.Duration) (*Standard, error) {
	return newStandard(secrets, tolerance, svixDialect)
}

func init() {
	Register(Scheme{
		Name: "svix",
		ID:   Location{Header: "svix-id"}, Type: Location{Field: "type"},
		CheckSecret: func(s string) error {
			if err := CheckStandardSecret(s); err != nil {
				return fmt.Errorf("invalid svix secret: %w", err)
			}
			return nil
		},
		KeepHeaders: []string{"svix-timestamp"},
		New:         func(p Params) (Verifier, error) { return NewSvix(p.Secrets, p.Tolerance) },
	})
}
