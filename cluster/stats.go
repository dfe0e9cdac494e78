package cluster

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// StatsConfig configures NewStatsBucket; zero values take the stated
// defaults.
type StatsConfig struct {
	// Gateway names this gateway in the keys it writes. Required.
	Gateway string
	// Bucket is the KV bucket (Deployment's Stats). Default
	// "HOOKGATE_STATS".
	Bucket string
	// Replicas of the bucket. Default 1.
	Replicas int
	// TTL is how long the bucket keeps a sample. Default 25h (the
	// console's day and a margin).
	TTL time.Duration
	// Own reads only this gateway's samples (a gateway not in cluster
	// mode, whose NATS others may share). Default false: every gateway's.
	Own bool
	// JetStream returns the broker's current JetStream context (nil while
	// not connected).
	JetStream func() natsjs.JetStream
	// Wait bounds each request to the bucket. Default 5s.
	Wait time.Duration
	// UntilElected, if set, cuts the bucket's lookup short at its leader
	// election, where a creation not answered yet looks up what was made.
	UntilElected UntilElected
	// ReadBytes bounds the values one Read returns (past it, the batch
	// being read); the rest comes at the next Read. Default 8 MiB.
	ReadBytes int
}

// DefaultStatsBucket is the default deployment's bucket of the console's
// samples.
const DefaultStatsBucket = "HOOKGATE_STATS"

// DefaultStatsTTL is StatsConfig.TTL's default.
const DefaultStatsTTL = 25 * time.Hour

// ErrStatsNotConnected is the bucket's error while the broker is not
// connected to NATS.
var ErrStatsNotConnected = errors.New("cluster stats: not connected to nats")

// maxStatsValue bounds a sample read from the bucket.
const maxStatsValue = 256 << 10

const (
	// DefaultStatsReadBytes is StatsConfig.ReadBytes's default.
	DefaultStatsReadBytes = 8 << 20
	// statsBatch is how many messages a fetch of Read takes at most.
	statsBatch = 64
)

// StatsEntry is one gateway's sample: its value is the console's.
type StatsEntry struct {
	Gateway string
	At      time.Time // to the millisecond
	Value   []byte
}

// StatsBucket is where the gateways' console samples meet: one key per
// gateway and sample time (the gateway's name base64url-encoded, a dot,
// the time in unix milliseconds), each written once, kept for the TTL.
// Read returns what was written since its previous call.
type StatsBucket struct {
	cfg StatsConfig
	log *slog.Logger

	mu      sync.Mutex       // one Read at a time
	created time.Time        // when the bucket read was made
	seen    uint64           // the last stream sequence read
	cons    natsjs.Consumer  // the reads' consumer, from seen on; nil until made
	consJS  natsjs.JetStream // the connection cons was made on
	consSeq uint64           // the last consumer sequence cons delivered

	bucket openBucket
}

// NewStatsBucket returns the bucket of cfg; it is made at the first use.
func NewStatsBucket(cfg StatsConfig, log *slog.Logger) (*StatsBucket, error) {
	if cfg.Gateway == "" {
		return nil, errors.New("cluster stats: no gateway name")
	}
	if cfg.Bucket == "" {
		cfg.Bucket = DefaultStatsBucket
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultStatsTTL
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 5 * time.Second
	}
	if cfg.ReadBytes <= 0 {
		cfg.ReadBytes = DefaultStatsReadBytes
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &StatsBucket{cfg: cfg, log: log}, nil
}

// Gateway is the name this gateway writes its samples under.
func (b *StatsBucket) Gateway() string { return b.cfg.Gateway }

// statsKey is the key of gateway's sample at.
func statsKey(gateway string, at time.Time) string {
	return base64.RawURLEncoding.EncodeToString([]byte(gateway)) + "." + strconv.FormatInt(at.UnixMilli(), 10)
}

// parseStatsKey reads a key of statsKey.
func parseStatsKey(key string) (gateway string, at time.Time, err error) {
	enc, ms, ok := strings.Cut(key, ".")
	if !ok || len(enc) > 400 {
		return "", time.Time{}, fmt.Errorf("key %.80q: not a gateway's sample", key)
	}
	g, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || len(g) == 0 {
		return "", time.Time{}, fmt.Errorf("key %.80q: not a gateway's sample", key)
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || n < 0 {
		return "", time.Time{}, fmt.Errorf("key %.80q: not a time", key)
	}
	return strings.ToValidUTF8(string(g), "?"), time.UnixMilli(n), nil
}

// Put writes this gateway's sample at.
func (b *StatsBucket) Put(ctx context.Context, at time.Time, value []byte) error {
	kv, err := b.open(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Wait)
	defer cancel()
	err = whileNoLeader(ctx, func() error {
		_, err := kv.Put(ctx, statsKey(b.cfg.Gateway, at), value)
		return err
	})
	if err != nil {
		b.forget(kv)
		return fmt.Errorf("cluster stats: put: %w", err)
	}
	return nil
}

// readIdle is how long the reads' consumer outlives the last read: the
// server drops it then, and the next read makes it again.
const readIdle = 5 * time.Minute

// errStatsGap says the reads' consumer skipped a message.
var errStatsGap = errors.New("a message skipped")

// Read returns the samples written since the previous Read (at the first,
// all the bucket holds), at most ReadBytes of values and a batch: more
// says there are more to read; anew says the bucket is not the one read
// before (made anew: what it held is gone). A bucket not found is made
// again. Reads share one consumer (made once, again if it is gone or
// skipped a message, or on a new connection), not one each.
func (b *StatsBucket) Read(ctx context.Context) (entries []StatsEntry, anew, more bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Wait)
	defer cancel()
	s, err := b.stream(ctx)
	if err != nil {
		return nil, false, false, err
	}
	info := s.CachedInfo()
	if !info.Created.Equal(b.created) || info.State.LastSeq < b.seen {
		anew = !b.created.IsZero()
		b.created, b.seen = info.Created, 0
		b.dropConsumer(ctx, s)
	}
	if info.State.LastSeq <= b.seen {
		return nil, anew, false, nil
	}
	js := b.cfg.JetStream()
	for {
		fresh := b.cons == nil || b.consJS != js
		if fresh {
			b.dropConsumer(ctx, s)
			if err := b.makeConsumer(ctx, s, js); err != nil {
				return entries, anew, false, err
			}
		}
		var more bool
		fetch := func() (err error) {
			more, err = b.fetch(info.State.LastSeq, &entries)
			return err
		}
		if fresh {
			// A consumer just made has no responders for a moment on a
			// NATS cluster: its node's interest is still on its way to
			// the node this gateway is connected to.
			err = whileNoLeader(ctx, fetch)
		} else {
			err = fetch()
		}
		if err == nil {
			return entries, anew, more, nil
		}
		gone := errors.Is(err, errStatsGap) || errors.Is(err, nats.ErrNoResponders) || errors.Is(err, natsjs.ErrConsumerNotFound)
		if !gone {
			b.cons, b.consJS = nil, nil // NATS may not answer: left to its inactivity threshold
		} else {
			b.dropConsumer(ctx, s)
		}
		if fresh || !gone {
			return entries, anew, false, fmt.Errorf("cluster stats: bucket %s: read: %w", b.cfg.Bucket, err)
		}
	}
}

// makeConsumer makes the reads' consumer on s, from seen on.
func (b *StatsBucket) makeConsumer(ctx context.Context, s natsjs.Stream, js natsjs.JetStream) error {
	filter := "$KV." + b.cfg.Bucket + ".>"
	if b.cfg.Own {
		filter = "$KV." + b.cfg.Bucket + "." + base64.RawURLEncoding.EncodeToString([]byte(b.cfg.Gateway)) + ".*"
	}
	c, err := s.CreateOrUpdateConsumer(ctx, natsjs.ConsumerConfig{
		DeliverPolicy:     natsjs.DeliverByStartSequencePolicy,
		OptStartSeq:       b.seen + 1,
		AckPolicy:         natsjs.AckNonePolicy,
		FilterSubject:     filter,
		InactiveThreshold: readIdle,
		Replicas:          1,
		MemoryStorage:     true,
	})
	if err != nil {
		return fmt.Errorf("cluster stats: bucket %s: read: %w", b.cfg.Bucket, err)
	}
	b.cons, b.consJS, b.consSeq = c, js, 0
	return nil
}

// dropConsumer deletes the reads' consumer, if any (a failure is left to
// its inactivity threshold).
func (b *StatsBucket) dropConsumer(ctx context.Context, s natsjs.Stream) {
	if b.cons == nil {
		return
	}
	name := b.cons.CachedInfo().Name
	b.cons, b.consJS = nil, nil
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.Wait)
	defer cancel()
	_ = s.DeleteConsumer(dctx, name)
}

// fetch appends to entries what the reads' consumer has, up to the stream
// sequence last, and stops once they hold ReadBytes of values (more: the
// rest is left for the next Read).
func (b *StatsBucket) fetch(last uint64, entries *[]StatsEntry) (more bool, err error) {
	prefix := "$KV." + b.cfg.Bucket + "."
	size := 0
	for _, e := range *entries {
		size += len(e.Value)
	}
	for b.seen < last {
		if size >= b.cfg.ReadBytes {
			return true, nil
		}
		batch, err := b.cons.FetchNoWait(statsBatch)
		if err != nil {
			return false, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				continue
			}
			if meta.Sequence.Consumer != b.consSeq+1 {
				return false, errStatsGap // read again from seen on
			}
			b.consSeq = meta.Sequence.Consumer
			b.seen = max(b.seen, meta.Sequence.Stream)
			if op := m.Headers().Get("KV-Operation"); op != "" || len(m.Data()) > maxStatsValue {
				continue // a delete or purge; an oversized value
			}
			g, at, err := parseStatsKey(strings.TrimPrefix(m.Subject(), prefix))
			if err != nil {
				b.log.Debug("cluster stats: an entry skipped", "bucket", b.cfg.Bucket, "err", err)
				continue
			}
			*entries = append(*entries, StatsEntry{Gateway: g, At: at, Value: m.Data()})
			size += len(m.Data())
		}
		if err := batch.Error(); err != nil && !errors.Is(err, natsjs.ErrNoMessages) {
			return false, err
		}
		if n == 0 {
			return false, nil // the rest is another gateway's (Own) or gone
		}
	}
	return false, nil
}

// stream is the bucket's stream; a bucket not found is made again.
func (b *StatsBucket) stream(ctx context.Context) (natsjs.Stream, error) {
	for range 2 {
		kv, err := b.open(ctx)
		if err != nil {
			return nil, err
		}
		js := b.cfg.JetStream()
		if js == nil {
			return nil, ErrStatsNotConnected
		}
		var s natsjs.Stream
		err = whileNoLeader(ctx, func() (err error) {
			s, err = js.Stream(ctx, "KV_"+b.cfg.Bucket)
			return err
		})
		if errors.Is(err, natsjs.ErrStreamNotFound) {
			b.forget(kv)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("cluster stats: bucket %s: %w", b.cfg.Bucket, err)
		}
		return s, nil
	}
	return nil, fmt.Errorf("cluster stats: bucket %s: not found", b.cfg.Bucket)
}

// open returns the bucket, created or updated to the config on a new
// connection.
func (b *StatsBucket) open(ctx context.Context) (natsjs.KeyValue, error) {
	js := b.cfg.JetStream()
	if js == nil {
		return nil, ErrStatsNotConnected
	}
	return b.bucket.get(ctx, js, "cluster stats", natsjs.KeyValueConfig{
		Bucket:      b.cfg.Bucket,
		Description: "hookgate: each gateway's console samples, one a minute",
		History:     1,
		TTL:         b.cfg.TTL,
		Replicas:    b.cfg.Replicas,
		Storage:     natsjs.FileStorage,
	}, b.cfg.Wait, b.cfg.UntilElected, b.log)
}

// forget makes the next open look the bucket up again, unless another
// caller did meanwhile.
func (b *StatsBucket) forget(kv natsjs.KeyValue) { b.bucket.forget(kv) }
