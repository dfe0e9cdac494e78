package signature

import (
	"encoding/base64"
	"errors"
	"strings"
)

// minStandardKey is the shortest accepted Standard Webhooks key, in bytes.
const minStandardKey = 16

// DecodeStandardSecret returns the key of a Standard Webhooks secret: the
// base64 after an optional "whsec_" prefix.
//
// The base64 is the standard, padded alphabet (as in the Standard Webhooks
// reference libraries) and must decode to at least 16 bytes. Errors never
// contain the secret.
func DecodeStandardSecret(secret string) ([]byte, error) {
	s := strings.TrimPrefix(secret, "whsec_")
	if s == "" {
		return nil, errors.New("empty secret")
	}
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, errors.New("secret is not whsec_<base64>")
	}
	if len(key) < minStandardKey {
		return nil, errors.New("secret key shorter than 16 bytes")
	}
	return key, nil
}
