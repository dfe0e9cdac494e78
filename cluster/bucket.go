package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/jetstream"
)

// Change is one setting of a bucket that differs from the config.
type Change struct {
	Setting  string // "ttl", "replicas", "history" or "storage"
	From, To string
}

func (c Change) String() string { return c.Setting + " " + c.From + " → " + c.To }

// RefusedError says that a bucket differs from the config and JetStream
// did not change it (storage cannot change; a number of replicas the
// cluster cannot place is refused). The bucket is usable as it is.
type RefusedError struct {
	Bucket  string
	Changes []Change
	Err     error
}

func (e *RefusedError) Error() string {
	parts := make([]string, len(e.Changes))
	for i, c := range e.Changes {
		parts[i] = c.String()
	}
	return fmt.Sprintf("cluster: bucket %s: jetstream refused %s: %v", e.Bucket, strings.Join(parts, ", "), e.Err)
}

func (e *RefusedError) Unwrap() error { return e.Err }

// errStorage: JetStream cannot change a stream's storage.
var errStorage = errors.New("a bucket's storage cannot change: delete the bucket (its claims or states are lost) or keep its storage")

// changes lists what differs between a bucket's stream config and cfg.
func changes(have natsjs.StreamConfig, cfg natsjs.KeyValueConfig) []Change {
	var out []Change
	if have.MaxAge != cfg.TTL {
		out = append(out, Change{"ttl", have.MaxAge.String(), cfg.TTL.String()})
	}
	if want := max(cfg.Replicas, 1); have.Replicas != want {
		out = append(out, Change{"replicas", strconv.Itoa(have.Replicas), strconv.Itoa(want)})
	}
	if want := int64(max(cfg.History, 1)); have.MaxMsgsPerSubject != want {
		out = append(out, Change{"history", strconv.FormatInt(have.MaxMsgsPerSubject, 10), strconv.FormatInt(want, 10)})
	}
	if have.Storage != cfg.Storage {
		out = append(out, Change{"storage", have.Storage.String(), cfg.Storage.String()})
	}
	return out
}

// ensureBucket returns the bucket of cfg: created if there is none (its
// revisions numbered from first, if not 0), else updated where its ttl,
// replicas or history differ from cfg (logged). If JetStream refuses the
// update, the bucket is returned as it is with a *RefusedError.
func ensureBucket(ctx context.Context, js natsjs.JetStream, cfg natsjs.KeyValueConfig, first uint64, elected UntilElected, log *slog.Logger) (natsjs.KeyValue, error) {
	var kv natsjs.KeyValue
	// Lookups are given up at the bucket's leader election (UntilElected);
	// its creation is not, which elects its first leader, but at an
	// election before it answers the bucket is looked up (jetstream.Made).
	lookup := func() error {
		return elected.answered(ctx, "KV_"+cfg.Bucket, func(lctx context.Context) (err error) {
			kv, err = js.KeyValue(lctx, cfg.Bucket)
			return err
		})
	}
	err := whileNoLeader(ctx, lookup)
	if errors.Is(err, natsjs.ErrBucketNotFound) {
		kv, err = made(ctx, elected, "KV_"+cfg.Bucket, func(cctx context.Context) (natsjs.KeyValue, error) {
			return createBucket(cctx, js, cfg, first)
		}, func(fctx context.Context) (natsjs.KeyValue, error) {
			return findMade(fctx, js, cfg.Bucket)
		})
		if errors.Is(err, natsjs.ErrBucketExists) || errors.Is(err, natsjs.ErrStreamNameAlreadyInUse) {
			// Another gateway made it meanwhile; until its creation
			// lands, the bucket is not found.
			for {
				err = lookup()
				if !noLeader(err) && !errors.Is(err, natsjs.ErrBucketNotFound) || !sleep(ctx, 100*time.Millisecond) {
					break
				}
			}
		} else if err == nil {
			log.Info("cluster bucket created", "bucket", cfg.Bucket, "ttl", cfg.TTL, "replicas", max(cfg.Replicas, 1))
			return findMade(ctx, js, cfg.Bucket)
		}
	}
	if err != nil {
		return nil, err
	}
	var st natsjs.KeyValueStatus
	err = whileNoLeader(ctx, func() error {
		return elected.answered(ctx, "KV_"+cfg.Bucket, func(lctx context.Context) (err error) {
			st, err = kv.Status(lctx)
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read its config: %w", err)
	}
	bs, ok := st.(*natsjs.KeyValueBucketStatus)
	if !ok {
		return kv, nil
	}
	diff := changes(bs.StreamInfo().Config, cfg)
	if len(diff) == 0 {
		return kv, nil
	}
	for _, c := range diff {
		if c.Setting == "storage" {
			return kv, &RefusedError{Bucket: cfg.Bucket, Changes: diff, Err: errStorage}
		}
	}
	updated, err := js.UpdateKeyValue(ctx, cfg)
	if err != nil {
		var apiErr *natsjs.APIError
		if errors.As(err, &apiErr) {
			return kv, &RefusedError{Bucket: cfg.Bucket, Changes: diff, Err: err}
		}
		return nil, fmt.Errorf("update it: %w", err)
	}
	args := []any{"bucket", cfg.Bucket}
	for _, c := range diff {
		args = append(args, c.Setting, c.From+" → "+c.To)
	}
	log.Info("cluster bucket updated to the config", args...)
	for _, c := range diff {
		if c.Setting == "replicas" {
			waitReplicas(ctx, js, cfg)
		}
	}
	return updated, nil
}

// waitReplicas waits, until ctx ends, for the bucket's stream to have a
// leader and every replica current: writes made while its peers change
// (after a change of replicas) can go unanswered.
func waitReplicas(ctx context.Context, js natsjs.JetStream, cfg natsjs.KeyValueConfig) {
	want := max(cfg.Replicas, 1)
	for {
		if s, err := js.Stream(ctx, "KV_"+cfg.Bucket); err == nil {
			ci := s.CachedInfo().Cluster
			if ci == nil {
				return
			}
			current := 0
			for _, p := range ci.Replicas {
				if p.Current {
					current++
				}
			}
			if ci.Leader != "" && current == want-1 {
				return
			}
		}
		if !sleep(ctx, 100*time.Millisecond) {
			return
		}
	}
}

// UntilElected derives a context cancelled at the next leader election
// JetStream announces of the stream named stream (a bucket's is
// KV_<bucket>; jetstream.Broker.UntilElectedIn). A bucket's or stream's
// lookup made while it has no leader is not answered, nor by the leader
// elected next: it is given up then, and the next try made at once.
type UntilElected func(ctx context.Context, stream string) (context.Context, context.CancelFunc)

// cut is ctx cut at stream's next leader election; a nil f cuts nothing.
func (f UntilElected) cut(ctx context.Context, stream string) (context.Context, context.CancelFunc) {
	if f == nil {
		return context.WithCancel(ctx)
	}
	return f(ctx, stream)
}

// answered makes the request req under a context cut at stream's next
// leader election, and again at once each time an election cuts it while
// ctx lasts (the election may be of the stream's first leader, announced
// after another gateway's creation answered).
func (f UntilElected) answered(ctx context.Context, stream string, req func(context.Context) error) error {
	cut := func(ctx context.Context) (context.Context, context.CancelFunc) { return f.cut(ctx, stream) }
	_, err := jetstream.Answered(ctx, cut, func(ctx context.Context) (struct{}, error) { return struct{}{}, req(ctx) })
	return err
}

// backoff is a loop's wait after a failed try on a stream (a bucket's is
// KV_<bucket>): twice the one before, from first to most, and ended by
// the stream's next leader election after the try began (its group
// answers nothing until then, and its new leader nothing asked before).
type backoff struct {
	first, most time.Duration
	elected     UntilElected
	stream      string

	wait   time.Duration
	cut    context.Context // ends at the election, from begin
	cancel context.CancelFunc
}

// newBackoff is the wait of a loop on stream: from 100ms to 5s.
func newBackoff(elected UntilElected, stream string) backoff {
	return backoff{first: 100 * time.Millisecond, most: 5 * time.Second, elected: elected, stream: stream}
}

// begin is called before each try: the wait after it ends at the
// stream's next election from now.
func (b *backoff) begin(ctx context.Context) {
	b.end()
	b.cut, b.cancel = b.elected.cut(ctx, b.stream)
}

// failed waits after a failed try; false if ctx ended.
func (b *backoff) failed(ctx context.Context) bool {
	b.wait = min(max(2*b.wait, b.first), b.most)
	cut := b.cut
	if cut == nil {
		cut = ctx
	}
	sleep(cut, b.wait)
	b.end()
	return ctx.Err() == nil
}

// reset makes the next failure wait first again.
func (b *backoff) reset() { b.wait = 0 }

// end releases the election taken by begin.
func (b *backoff) end() {
	if b.cancel != nil {
		b.cancel()
	}
	b.cut, b.cancel = nil, nil
}

// made makes the creation create of stream under jetstream.Made: at each
// election of stream before create answers, what was made is looked up
// (find). A nil f watches no elections.
func made[T any](ctx context.Context, f UntilElected, stream string, create, find func(context.Context) (T, error)) (T, error) {
	if f == nil {
		return create(ctx)
	}
	cut := func(ctx context.Context) (context.Context, context.CancelFunc) { return f.cut(ctx, stream) }
	return jetstream.Made(ctx, cut, create, find)
}

// noLeader says whether err is "no responders": the stream has no leader
// (just made, or a NATS leader election).
func noLeader(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, natsjs.ErrNoStreamResponse)
}

// whileNoLeader calls f again while it finds no leader, until ctx ends.
func whileNoLeader(ctx context.Context, f func() error) error {
	for {
		err := f()
		if !noLeader(err) || !sleep(ctx, 100*time.Millisecond) {
			return err
		}
	}
}

// checkBucket fails unless bucket's stream is found and, on a NATS
// cluster, has a leader: a bucket that answers.
func checkBucket(ctx context.Context, js natsjs.JetStream, bucket string) error {
	return checkStream(ctx, js, "KV_"+bucket, "bucket "+bucket)
}

// checkStream fails unless stream is found and, on a NATS cluster, has a
// leader (one STREAM.INFO request); what names it in the error.
func checkStream(ctx context.Context, js natsjs.JetStream, stream, what string) error {
	if js == nil {
		return errors.New("not connected to nats")
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	info := s.CachedInfo()
	if info.Cluster != nil && info.Cluster.Leader == "" {
		return fmt.Errorf("%s: its stream has no leader", what)
	}
	return nil
}

// Check fails unless the bucket answers: found, with a leader.
func (c *Claims) Check(ctx context.Context) error {
	return checkBucket(ctx, c.cfg.JetStream(), c.cfg.Bucket)
}

// Check fails unless the bucket answers: found, with a leader.
func (s *DeliveryState) Check(ctx context.Context) error {
	return checkBucket(ctx, s.js(), s.cfg.Bucket)
}

// Check fails unless the bucket answers: found, with a leader.
func (p *Pauses) Check(ctx context.Context) error {
	return checkBucket(ctx, p.cfg.JetStream(), p.cfg.Bucket)
}

// Check fails unless the bucket answers and this gateway's last write of
// what a route takes succeeded: a route pulls only once its record is
// written (a NATS user refused $KV.<bucket>.> pulls nothing).
func (t *Takes) Check(ctx context.Context) error {
	if err := checkBucket(ctx, t.cfg.JetStream(), t.cfg.Bucket); err != nil {
		return err
	}
	t.mu.Lock()
	err := t.failed
	t.mu.Unlock()
	if err != nil {
		return fmt.Errorf("bucket %s: cannot record what the routes take here, and a route pulls once it is recorded: %w", t.cfg.Bucket, err)
	}
	return nil
}

// Check fails unless the records stream answers: found, with a leader.
func (r *Records) Check(ctx context.Context) error {
	return checkStream(ctx, r.cfg.JetStream(), r.cfg.Stream, "stream "+r.cfg.Stream)
}

// firstRevision is where a bucket made at now numbers its revisions from:
// its time in milliseconds times 1024. That is past every revision of a
// bucket of the same name made earlier (which would have needed more than
// a million writes a second to get there), so versions the stores took
// from a bucket since lost (its NATS storage gone, or deleted) stay below
// those of the bucket made anew.
func firstRevision(now time.Time) uint64 { return uint64(now.UnixMilli()) << 10 }

// createBucket makes the bucket of cfg as nats.go's CreateKeyValue does
// (the same stream), its revisions numbered from first (0: from 1).
func createBucket(ctx context.Context, js natsjs.JetStream, cfg natsjs.KeyValueConfig, first uint64) (natsjs.KeyValue, error) {
	if first == 0 {
		return js.CreateKeyValue(ctx, cfg)
	}
	scfg := kvStream(cfg)
	scfg.FirstSeq = first
	if _, err := js.CreateStream(ctx, scfg); err != nil {
		return nil, err
	}
	return findMade(ctx, js, cfg.Bucket)
}

// findMade looks up a bucket made or being made, until it is found: it is
// not found while its stream has no leader if a member that made it
// answered an equal creation.
func findMade(ctx context.Context, js natsjs.JetStream, bucket string) (natsjs.KeyValue, error) {
	for {
		kv, err := js.KeyValue(ctx, bucket)
		if !noLeader(err) && !errors.Is(err, natsjs.ErrBucketNotFound) || !sleep(ctx, 100*time.Millisecond) {
			return kv, err
		}
	}
}

// kvStream is the stream nats.go's CreateKeyValue makes for cfg (without
// mirrors, sources, compression or limit markers, which no bucket here
// uses).
func kvStream(cfg natsjs.KeyValueConfig) natsjs.StreamConfig {
	history := int64(max(cfg.History, 1))
	maxBytes, maxValue := cfg.MaxBytes, cfg.MaxValueSize
	if maxBytes == 0 {
		maxBytes = -1
	}
	if maxValue == 0 {
		maxValue = -1
	}
	dups := 2 * time.Minute
	if cfg.TTL > 0 && cfg.TTL < dups {
		dups = cfg.TTL
	}
	return natsjs.StreamConfig{
		Name:              "KV_" + cfg.Bucket,
		Description:       cfg.Description,
		Subjects:          []string{"$KV." + cfg.Bucket + ".>"},
		MaxMsgsPerSubject: history,
		MaxBytes:          maxBytes,
		MaxAge:            cfg.TTL,
		MaxMsgSize:        maxValue,
		Storage:           cfg.Storage,
		Replicas:          max(cfg.Replicas, 1),
		Placement:         cfg.Placement,
		AllowRollup:       true,
		DenyDelete:        true,
		Duplicates:        dups,
		MaxMsgs:           -1,
		MaxConsumers:      -1,
		AllowDirect:       true,
		Discard:           natsjs.DiscardNew,
		Metadata:          cfg.Metadata,
	}
}

// openBucket is a KV bucket opened on the broker's current connection:
// made or updated to its config by the first caller on each new
// connection (ensureBucket), shared by the callers until forgotten.
type openBucket struct {
	mu sync.Mutex
	kv natsjs.KeyValue
	js natsjs.JetStream // the context kv was got from
}

// get returns the bucket on js, opened with cfg within wait; what names
// the bucket's user in errors and logs.
func (o *openBucket) get(ctx context.Context, js natsjs.JetStream, what string, cfg natsjs.KeyValueConfig,
	wait time.Duration, elected UntilElected, log *slog.Logger) (natsjs.KeyValue, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.kv != nil && o.js == js {
		return o.kv, nil
	}
	if js == nil {
		return nil, errors.New(what + ": not connected to nats")
	}
	tctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	kv, err := ensureBucket(tctx, js, cfg, 0, elected, log)
	if kv == nil {
		return nil, fmt.Errorf("%s: bucket %s: %w", what, cfg.Bucket, err)
	}
	if err != nil {
		log.Warn(what+": the bucket is used as it is", "err", err)
	}
	o.kv, o.js = kv, js
	return kv, nil
}

// forget makes the next get open the bucket again, unless another caller
// did meanwhile.
func (o *openBucket) forget(kv natsjs.KeyValue) {
	o.mu.Lock()
	if o.kv == kv {
		o.kv, o.js = nil, nil
	}
	o.mu.Unlock()
}

// watchAll starts a watch of every key of kv, which lives until cancel is
// called; its making is bounded by wait.
func watchAll(ctx context.Context, kv natsjs.KeyValue, wait time.Duration) (natsjs.KeyWatcher, context.CancelFunc, error) {
	wctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(wait, cancel)
	w, err := kv.WatchAll(wctx)
	if !timer.Stop() && err == nil {
		_ = w.Stop()
		err = errors.New("no answer within " + wait.String())
	}
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return w, cancel, nil
}
