// Package signature verifies inbound webhook signatures and signs outbound requests (Standard Webhooks).
//
// A [Verifier] checks one request: the signature header(s), reached through
// a [Header] lookup, against the raw request body. Implementations are
// [Stripe], [Standard] (Standard Webhooks 1.0, v1 and v1a; also Svix's
// headers, [NewSvix]), [GitHub], the generic [HMAC], [None] and the
// provider presets. All of them are safe for concurrent use.
//
// Each verify scheme a source may name is a [Scheme] in one registry
// ([Register], [Lookup]), declared in its own file: the verifier's
// constructor and the data around it (where its events carry their ID and
// type, its secrets' form, a handshake).
//
// Every verifier accepts several secrets (rotation): a request is authentic
// if any signature it carries matches any secret. Signatures are compared in
// constant time, always over the raw body.
//
// # Errors
//
// Verify returns nil or an error wrapping exactly one of the sentinels, to be
// tested with errors.Is:
//
//   - [ErrMissing]: a required header is absent or empty.
//   - [ErrMalformed]: a header cannot be parsed (bad structure, bad timestamp).
//   - [ErrMismatch]: the headers parse but no signature matches any secret.
//     This includes headers with no signature of a supported version (a
//     Stripe header without v1=, a webhook-signature without v1,) and
//     signatures that are not validly encoded digests: such entries are
//     ignored, the way the senders' reference libraries ignore them.
//   - [ErrTimestamp]: the signature is authentic but its timestamp is more
//     than the tolerance away from now, in either direction.
//
// Error messages are lowercase and never contain secrets, signatures or
// other header values, so they may be logged and returned to clients.
//
// # Order of checks
//
// Timestamped schemes (Stripe, Standard, Slack, Twitch, Discord) check the
// signature before the timestamp. ErrTimestamp therefore means the request
// was really signed by the sender but is stale or from the future (a
// replay, or clock skew); a forged request always yields ErrMismatch,
// whatever its timestamp.
//
// # Timestamps
//
// Timestamps must be canonical decimal Unix seconds: ASCII digits only, no
// sign, no leading zeros, fitting in an int64. Senders only produce that
// form, and it makes the signed bytes unambiguous.
// Twitch's are RFC 3339 times, signed as sent.
package signature
