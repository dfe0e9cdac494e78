package signature

import (
	"crypto/ed25519"
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

// Prefixes of Standard Webhooks asymmetric keys.
const (
	publicKeyPrefix  = "whpk_"
	privateKeyPrefix = "whsk_"
)

// DecodeStandardPublicKey returns the ed25519 public key of a Standard
// Webhooks "whpk_<base64>" key (32 bytes, standard padded base64), which
// verifies v1a signatures. Errors never contain the key.
func DecodeStandardPublicKey(key string) (ed25519.PublicKey, error) {
	s, ok := strings.CutPrefix(key, publicKeyPrefix)
	if !ok {
		return nil, errors.New("public key is not whpk_<base64>")
	}
	var pub [ed25519.PublicKeySize]byte
	if !decodeBase64(pub[:], s) {
		return nil, errors.New("public key is not whpk_ and the base64 of 32 bytes")
	}
	return ed25519.PublicKey(pub[:]), nil
}

// CheckStandardSecret reports why secret is neither a Standard Webhooks
// secret (whsec_) nor a public key (whpk_). Errors never contain it.
func CheckStandardSecret(secret string) error {
	switch {
	case strings.HasPrefix(secret, publicKeyPrefix):
		_, err := DecodeStandardPublicKey(secret)
		return err
	case strings.HasPrefix(secret, privateKeyPrefix):
		return errors.New("a whsk_ key is the sender's private key: configure its whpk_ public key")
	}
	_, err := DecodeStandardSecret(secret)
	return err
}
