// Package cluster owns what the gateways of one NATS cluster share so that
// they behave as one gateway: the claim store, a JetStream KV bucket in
// which the first gateway to claim an event (source, event ID) holds it
// for the dedup horizon. A claim is a create-only write (KV Create: a
// second Create of the same key fails), replicated by JetStream's RAFT, so
// exactly one gateway in the cluster publishes and delivers each event.
//
// A gateway claims an event after its own store committed it (so the
// gateway holding a claim always has the event to publish): at intake,
// within a short timeout, to answer a copy another gateway holds as a
// duplicate; and before publishing it, always (the relay's Publisher, see
// relay.ClaimingPublisher), which is where an event accepted while NATS
// was unreachable is claimed.
//
// The delivery state (DeliveryState) is the other shared part: where each
// (route, event) stands, in a second KV bucket changed only by
// compare-and-set, so that one round of a delivery runs at a time across
// the gateways and a delivery finished anywhere is not run again.
package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/store"
)

// Config tunes Claims.
type Config struct {
	// Gateway names this gateway in the claims it makes. Required; stable
	// across restarts of one data_dir.
	Gateway string
	// Bucket is the KV bucket (Deployment's Claims). Default
	// DefaultClaimsBucket.
	Bucket string
	// Replicas of the bucket. Default 1.
	Replicas int
	// TTL is how long a claim is kept: the dedup horizon across gateways.
	// Required.
	TTL time.Duration
	// JetStream returns the connection's JetStream handle.
	JetStream func() natsjs.JetStream
	// UntilElected, if set, cuts the bucket's lookup short at its leader
	// election, where a creation not answered yet looks up what was made.
	UntilElected UntilElected
	// Connected, if set, says whether NATS is connected: claims at intake
	// are not tried while it is not (intake answers from the local store
	// at once, and the relay claims later).
	Connected func() bool
	// Remember is how many of this gateway's recent claim outcomes are
	// kept in memory, so that the relay need not ask again for an event
	// claimed at intake. Default 65536.
	Remember int
	// Log receives what changed in the bucket. Default: discarded.
	Log *slog.Logger
}

// Owner is a claim's value: who holds the event.
type Owner struct {
	Gateway   string    `json:"gateway"`
	Seq       int64     `json:"seq"` // the event's seq in the holder's store
	Source    string    `json:"source"`
	EventID   string    `json:"event_id"`
	ClaimedAt time.Time `json:"claimed_at"`
	// Digest is a task's request fingerprint (a SHA-256 of its stored
	// body, hex; tasks only: source store.TaskSource): another gateway
	// given the same Idempotency-Key compares it with its request's.
	Digest string `json:"digest,omitempty"`
}

// Digest is the digest of ev a claim carries: a task's request
// fingerprint (SHA-256 of its body, hex), else "".
func Digest(ev *store.Event) string {
	if ev.Source != store.TaskSource {
		return ""
	}
	sum := sha256.Sum256(ev.Body)
	return hex.EncodeToString(sum[:])
}

// DefaultClaimsBucket is the default deployment's bucket of claims.
const DefaultClaimsBucket = "HOOKGATE_CLAIMS"

// Claims is the claim store.
type Claims struct {
	cfg Config

	mu     sync.Mutex
	kv     natsjs.KeyValue
	kvJS   natsjs.JetStream // the context kv was got from
	recent map[string]Owner // key → holder, for claims this gateway made or saw
	order  []string         // recent's keys, oldest first
}

// New returns the claim store; the bucket is created (or updated to cfg)
// at the first claim, or by Ensure.
func New(cfg Config) (*Claims, error) {
	if cfg.Gateway == "" {
		return nil, errors.New("cluster claims: no gateway name")
	}
	if cfg.TTL <= 0 {
		return nil, errors.New("cluster claims: no ttl")
	}
	if cfg.Bucket == "" {
		cfg.Bucket = DefaultClaimsBucket
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	if cfg.Remember <= 0 {
		cfg.Remember = 65536
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Claims{cfg: cfg, recent: map[string]Owner{}}, nil
}

// Gateway is the name this gateway's claims carry.
func (c *Claims) Gateway() string { return c.cfg.Gateway }

// Key is the claim key of (source, id): KV keys allow only
// [-/_=.a-zA-Z0-9], so the first 128 bits of a SHA-256 of both, base64url
// (22 characters: the server keeps every key in memory).
func Key(source, id string) string {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(source))) // no (source, id) pair reads as another
	h.Write(n[:])
	h.Write([]byte(source))
	h.Write([]byte(id))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:16])
}

// Ensure creates the bucket, or updates it to the config; a
// *RefusedError says JetStream refused the update (the bucket is used as
// it is).
func (c *Claims) Ensure(ctx context.Context) error {
	_, err := c.open(ctx)
	return err
}

// bucket is the bucket, made or updated at the first use on each
// connection.
func (c *Claims) bucket(ctx context.Context) (natsjs.KeyValue, error) {
	kv, err := c.open(ctx)
	if kv == nil {
		return nil, err
	}
	return kv, nil
}

// open is the bucket with, if JetStream refused to update it to the
// config, a *RefusedError (logged).
func (c *Claims) open(ctx context.Context) (natsjs.KeyValue, error) {
	js := c.cfg.JetStream()
	c.mu.Lock()
	kv, kvJS := c.kv, c.kvJS
	c.mu.Unlock()
	if kv != nil && kvJS == js {
		return kv, nil
	}
	if js == nil {
		return nil, errors.New("cluster claims: not connected to nats")
	}
	kv, err := ensureBucket(ctx, js, natsjs.KeyValueConfig{
		Bucket:      c.cfg.Bucket,
		Description: "hookgate: which gateway holds each event (source, event id)",
		TTL:         c.cfg.TTL,
		Replicas:    c.cfg.Replicas,
		Storage:     natsjs.FileStorage,
		History:     1,
	}, 0, c.cfg.UntilElected, c.cfg.Log)
	if kv == nil {
		return nil, fmt.Errorf("cluster claims: bucket %s: %w", c.cfg.Bucket, err)
	}
	if err != nil {
		c.cfg.Log.Warn("cluster claims: the bucket is used as it is", "err", err)
	}
	c.mu.Lock()
	c.kv, c.kvJS = kv, js
	c.mu.Unlock()
	return kv, err
}

// forgetBucket drops kv, unless another call replaced it already.
func (c *Claims) forgetBucket(kv natsjs.KeyValue) {
	c.mu.Lock()
	if c.kv == kv {
		c.kv = nil
	}
	c.mu.Unlock()
}

// Claim claims (source, id), stored here as seq, for this gateway. mine is
// true when this gateway holds the claim (made now, or before: a claim
// made at intake, or before a restart); else holder is the gateway that
// does. An error means the cluster could not be asked (NATS unreachable,
// no quorum, ctx ended): nothing is known.
func (c *Claims) Claim(ctx context.Context, source, id string, seq int64) (mine bool, holder Owner, err error) {
	return c.claim(ctx, source, id, seq, "")
}

// claim is Claim, the claim carrying digest.
func (c *Claims) claim(ctx context.Context, source, id string, seq int64, digest string) (mine bool, holder Owner, err error) {
	key := Key(source, id)
	if o, ok := c.remembered(key); ok {
		return o.Gateway == c.cfg.Gateway, o, nil
	}
	kv, err := c.bucket(ctx)
	if err != nil {
		return false, Owner{}, err
	}
	// Remembered beyond the call: not the caller's (maybe reused) bytes.
	source, id = strings.Clone(source), strings.Clone(id)
	me := Owner{Gateway: c.cfg.Gateway, Seq: seq, Source: source, EventID: id, ClaimedAt: time.Now().UTC(), Digest: digest}
	val, err := json.Marshal(me)
	if err != nil {
		return false, Owner{}, err
	}
	_, err = kv.Create(ctx, key, val)
	if err == nil {
		c.remember(key, me)
		return true, me, nil
	}
	if !errors.Is(err, natsjs.ErrKeyExists) {
		c.forgetBucket(kv) // it may be gone (a wiped store): look it up again next time
		return false, Owner{}, fmt.Errorf("cluster claim %s/%s: %w", source, id, err)
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		// Expired between the two calls: claim it again.
		return c.claim(ctx, source, id, seq, digest)
	}
	if err != nil {
		return false, Owner{}, fmt.Errorf("cluster claim %s/%s: read the holder: %w", source, id, err)
	}
	if err := json.Unmarshal(e.Value(), &holder); err != nil {
		return false, Owner{}, fmt.Errorf("cluster claim %s/%s: the holder's value: %w", source, id, err)
	}
	c.remember(key, holder)
	return holder.Gateway == c.cfg.Gateway, holder, nil
}

// ClaimAtIntake claims ev, just stored here, for this gateway; holder is
// "" when this gateway holds it. It fails at once while NATS is not
// connected. The outcome is remembered for ClaimToPublish.
func (c *Claims) ClaimAtIntake(ctx context.Context, ev *store.Event) (holder string, err error) {
	if c.cfg.Connected != nil && !c.cfg.Connected() {
		return "", ErrNotConnected
	}
	mine, o, err := c.claim(ctx, ev.Source, ev.ID, ev.Seq, Digest(ev))
	if err != nil || mine {
		return "", err
	}
	return o.Gateway, nil
}

// Holder reads who holds (source, id): found is false when no gateway
// does (or its claim expired).
func (c *Claims) Holder(ctx context.Context, source, id string) (holder Owner, found bool, err error) {
	key := Key(source, id)
	if o, ok := c.remembered(key); ok {
		return o, true, nil
	}
	if c.cfg.Connected != nil && !c.cfg.Connected() {
		return Owner{}, false, ErrNotConnected
	}
	kv, err := c.bucket(ctx)
	if err != nil {
		return Owner{}, false, err
	}
	e, err := kv.Get(ctx, key)
	switch {
	case errors.Is(err, natsjs.ErrKeyNotFound):
		return Owner{}, false, nil
	case err != nil:
		return Owner{}, false, fmt.Errorf("cluster claim %s/%s: read the holder: %w", source, id, err)
	}
	if err := json.Unmarshal(e.Value(), &holder); err != nil {
		return Owner{}, false, fmt.Errorf("cluster claim %s/%s: the holder's value: %w", source, id, err)
	}
	return holder, true, nil
}

// ClaimToPublish claims ev before it is published, once: what intake
// learned is used, then forgotten. It fails at once while NATS is not
// connected and nothing is remembered.
func (c *Claims) ClaimToPublish(ctx context.Context, ev *store.Event) (holder string, err error) {
	key := Key(ev.Source, ev.ID)
	if _, ok := c.remembered(key); !ok && c.cfg.Connected != nil && !c.cfg.Connected() {
		return "", ErrNotConnected
	}
	mine, o, err := c.claim(ctx, ev.Source, ev.ID, ev.Seq, Digest(ev))
	if err != nil {
		return "", err
	}
	c.Forget(ev.Source, ev.ID)
	if mine {
		return "", nil
	}
	return o.Gateway, nil
}

// ErrNotConnected: NATS is not connected; no claim was tried.
var ErrNotConnected = errors.New("cluster claims: nats not connected")

// Forget drops what is remembered of (source, id)'s claim: the relay asks
// once per event, after intake did.
func (c *Claims) Forget(source, id string) {
	c.mu.Lock()
	delete(c.recent, Key(source, id))
	c.mu.Unlock()
}

func (c *Claims) remembered(key string) (Owner, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.recent[key]
	return o, ok
}

func (c *Claims) remember(key string, o Owner) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.recent[key]; !ok {
		c.order = append(c.order, key)
	}
	c.recent[key] = o
	// Keys forgotten already leave their place in order; trim both to the
	// bound, oldest first.
	for len(c.order) > c.cfg.Remember || (len(c.order) > 2*len(c.recent)+1024) {
		delete(c.recent, c.order[0])
		c.order = c.order[1:]
	}
}
