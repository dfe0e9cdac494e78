package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/internal/startstop"
)

// PausesConfig configures NewPauses; zero values take the stated defaults.
type PausesConfig struct {
	// Gateway names this gateway in the pauses it writes. Required.
	Gateway string
	// Bucket is the KV bucket (Deployment's Pauses). Default
	// "HOOKGATE_ROUTES".
	Bucket string
	// Replicas of the bucket. Default 1.
	Replicas int
	// JetStream returns the broker's current JetStream context (nil while
	// not connected).
	JetStream func() natsjs.JetStream
	// Connected, if set, says whether NATS is connected: Start does not
	// wait for the bucket while it is not.
	Connected func() bool
	// UntilElected, if set, ends the bucket's lookups and the watch's
	// wait after a failure at the bucket's leader election, where a
	// creation not answered yet looks up what was made.
	UntilElected UntilElected
	// Wait bounds each request to the bucket, and the watch's first
	// values. Default 5s.
	Wait time.Duration
	// Check is how often the watch is compared with the bucket (a watch
	// behind it, or a bucket made anew, is started again). Default 10s.
	Check time.Duration
}

// DefaultPausesBucket is the default deployment's bucket of the operators'
// pauses.
const DefaultPausesBucket = "HOOKGATE_ROUTES"

// PauseApplier is the engine as Pauses sees it: it applies a route's
// pause (a route it does not have is ignored) and says which routes its
// store has paused.
type PauseApplier interface {
	// ApplyPause pauses or resumes route here; gateway is where it was
	// asked.
	ApplyPause(route string, paused bool, gateway string) error
	// StoredPauses are the routes this gateway's store records paused.
	StoredPauses(ctx context.Context) ([]string, error)
}

// pauseEntry is a route's value in the bucket.
type pauseEntry struct {
	Paused  bool      `json:"paused"`
	Gateway string    `json:"gateway"`
	At      time.Time `json:"at"`
}

// maxPauseEntry bounds a value read from the bucket.
const maxPauseEntry = 1024

// pauseKeyPattern is what a route's key may be (config's route names).
var pauseKeyPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// Pauses shares the operators' pauses of routes between the gateways: one
// key per route in a KV bucket, written by the gateway asked (SetPause),
// watched by every gateway, which applies each change (and what the
// bucket holds when the watch starts) through its engine. The revision
// applied per route keeps a gateway's own write and the watch in order.
// A route paused in a gateway's store that the bucket does not know (a
// pause from before cluster mode, a bucket made anew) is written to it.
type Pauses struct {
	cfg PausesConfig
	log *slog.Logger

	mu      sync.Mutex // held while applying
	to      PauseApplier
	applied map[string]uint64 // route → the revision applied here
	epoch   time.Time         // when the bucket applied was made

	bucket openBucket

	ready  chan struct{} // closed once a watch gave its first values
	once   sync.Once
	loop   startstop.Loop
	warned atomic.Int64 // unix ms of the last warning
	wait   backoff      // the watch's after a failure
}

// NewPauses returns the shared pauses; Start runs the watch.
func NewPauses(cfg PausesConfig, log *slog.Logger) (*Pauses, error) {
	if cfg.Gateway == "" {
		return nil, errors.New("cluster pauses: no gateway name")
	}
	if cfg.Bucket == "" {
		cfg.Bucket = DefaultPausesBucket
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 5 * time.Second
	}
	if cfg.Check <= 0 {
		cfg.Check = 10 * time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Pauses{cfg: cfg, log: log, applied: map[string]uint64{}, ready: make(chan struct{}),
		wait: newBackoff(cfg.UntilElected, "KV_"+cfg.Bucket)}, nil
}

// Start runs the watch, applying to to; while NATS is connected it waits
// up to twice Wait for the bucket's values to be applied (else the
// store's copy holds until then: logged).
func (p *Pauses) Start(ctx context.Context, to PauseApplier) error {
	p.mu.Lock()
	p.to = to
	p.mu.Unlock()
	p.loop.Start(ctx, p.run)
	wait := 2 * p.cfg.Wait
	if p.cfg.Connected != nil && !p.cfg.Connected() {
		wait = 0
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-p.ready:
	case <-t.C:
		p.log.Warn("cluster pauses: the bucket did not answer; the routes this gateway's store has paused stay paused, the others deliver, until it does",
			"bucket", p.cfg.Bucket)
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// Stop stops the watch.
func (p *Pauses) Stop(context.Context) error {
	p.loop.Stop()
	return nil
}

// SetPause records in the bucket that route is paused (or resumed), and
// applies it here; every other gateway's watch applies it there.
func (p *Pauses) SetPause(ctx context.Context, route string, paused bool) error {
	if !pauseKeyPattern.MatchString(route) {
		return fmt.Errorf("cluster pauses: route %q: not a route name", route)
	}
	kv, err := p.open(ctx)
	if err != nil {
		return err
	}
	data, err := json.Marshal(pauseEntry{Paused: paused, Gateway: p.cfg.Gateway, At: time.Now().UTC()})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Wait)
	defer cancel()
	var rev uint64
	err = whileNoLeader(ctx, func() (err error) {
		rev, err = kv.Put(ctx, route, data)
		return err
	})
	if err != nil {
		p.forget(kv)
		return fmt.Errorf("cluster pauses: route %s: %w", route, err)
	}
	p.apply(route, rev, paused, p.cfg.Gateway)
	return nil
}

// open returns the bucket, created or updated to the config on a new
// connection.
func (p *Pauses) open(ctx context.Context) (natsjs.KeyValue, error) {
	return p.bucket.get(ctx, p.cfg.JetStream(), "cluster pauses", natsjs.KeyValueConfig{
		Bucket:      p.cfg.Bucket,
		Description: "hookgate: routes paused by an operator",
		History:     1,
		Replicas:    p.cfg.Replicas,
		Storage:     natsjs.FileStorage,
	}, p.cfg.Wait, p.cfg.UntilElected, p.log)
}

// forget makes the next open look the bucket up again.
func (p *Pauses) forget(kv natsjs.KeyValue) { p.bucket.forget(kv) }

// apply applies route's value of revision rev, unless a later one was.
func (p *Pauses) apply(route string, rev uint64, paused bool, gateway string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if rev <= p.applied[route] {
		return
	}
	p.applied[route] = rev
	if p.to == nil {
		return
	}
	if err := p.to.ApplyPause(route, paused, gateway); err != nil {
		p.log.Warn("cluster pauses: applied, but not recorded in this gateway's store", "route", route, "err", err)
	}
}

// run watches the bucket until stopped, starting again after any error:
// after a wait that ends at the bucket's next leader election at the
// latest.
func (p *Pauses) run(ctx context.Context) {
	defer p.wait.end()
	var fails failures
	for ctx.Err() == nil {
		p.wait.begin(ctx)
		read, err := p.watch(ctx)
		if ctx.Err() != nil {
			return
		}
		if read {
			fails.level(nil, time.Now()) // the bucket answered: a run of failures ends
			p.wait.reset()
		}
		if err == nil {
			continue
		}
		lvl := fails.level(err, time.Now())
		if lvl == slog.LevelDebug || warnEvery(&p.warned, 30*time.Second) {
			p.log.Log(ctx, lvl, "cluster pauses: cannot watch the bucket; trying again", "bucket", p.cfg.Bucket, "err", err)
		}
		if !p.wait.failed(ctx) {
			return
		}
	}
}

// watch applies the bucket's values, then every change, until an error,
// a new connection, a watch found behind the bucket, or ctx ends; read
// says whether it read the bucket's values.
func (p *Pauses) watch(ctx context.Context) (read bool, err error) {
	kv, err := p.open(ctx)
	if err != nil {
		return false, err
	}
	js := p.cfg.JetStream()
	w, cancel, err := watchAll(ctx, kv, p.cfg.Wait)
	if err != nil {
		p.forget(kv)
		return false, fmt.Errorf("cluster pauses: watch: %w", err)
	}
	defer cancel()
	defer func() { _ = w.Stop() }()

	created, err := p.created(ctx, js)
	if err != nil {
		return false, err
	}
	p.mu.Lock()
	if !created.Equal(p.epoch) {
		clear(p.applied) // a bucket made anew: its revisions start again
		p.epoch = created
	}
	p.mu.Unlock()
	return p.follow(ctx, kv, js, w)
}

// follow applies what watch w reads until it ends, a check finds it
// behind the bucket, a new connection (nil), or ctx ends (nil); done
// says whether it read the bucket's values.
func (p *Pauses) follow(ctx context.Context, kv natsjs.KeyValue, js natsjs.JetStream, w natsjs.KeyWatcher) (done bool, err error) {
	first := time.NewTimer(p.cfg.Wait)
	defer first.Stop()
	check := time.NewTicker(p.cfg.Check)
	defer check.Stop()
	var seen, behind uint64 // the last revision read; the bucket's last one at the previous check, if later
	initial := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return done, nil
		case <-first.C:
			if !done {
				return false, errors.New("cluster pauses: the watch gave no values within " + p.cfg.Wait.String())
			}
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return done, errors.New("cluster pauses: the watch ended")
			case e == nil && !done:
				done = true
				p.seed(ctx, kv, initial)
				p.once.Do(func() { close(p.ready) })
			case e != nil:
				seen = max(seen, e.Revision())
				if !done {
					initial[e.Key()] = true
				}
				p.read(e)
			}
		case <-check.C:
			if p.cfg.JetStream() != js {
				return done, nil // a new connection: watch through it
			}
			last, err := p.lastRevision(ctx, js)
			if err != nil {
				return done, err
			}
			if behind, err = watchBehind(seen, last, behind); err != nil {
				return done, err
			}
		}
	}
}

// watchBehind compares the last revision a watch read (seen) with the
// bucket's (last), and behind, the bucket's last revision at the previous
// check if the watch had not read it then: a watch that still has not
// read it has stopped; a bucket behind the watch was made anew. It
// returns the next behind.
func watchBehind(seen, last, behind uint64) (uint64, error) {
	switch {
	case last < seen:
		return 0, errors.New("cluster pauses: the bucket is behind what the watch read (made anew?)")
	case behind > seen:
		return 0, fmt.Errorf("cluster pauses: the watch has not read revision %d since the previous check (read %d)", behind, seen)
	case last > seen:
		return last, nil
	}
	return 0, nil
}

// lastRevision is the bucket's last revision.
func (p *Pauses) lastRevision(ctx context.Context, js natsjs.JetStream) (uint64, error) {
	info, err := p.info(ctx, js)
	if err != nil {
		return 0, err
	}
	return info.State.LastSeq, nil
}

// created is when the bucket was made.
func (p *Pauses) created(ctx context.Context, js natsjs.JetStream) (time.Time, error) {
	info, err := p.info(ctx, js)
	if err != nil {
		return time.Time{}, err
	}
	return info.Created, nil
}

func (p *Pauses) info(ctx context.Context, js natsjs.JetStream) (*natsjs.StreamInfo, error) {
	if js == nil {
		return nil, errors.New("cluster pauses: not connected to nats")
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Wait)
	defer cancel()
	var s natsjs.Stream
	err := whileNoLeader(ctx, func() error {
		return p.cfg.UntilElected.answered(ctx, "KV_"+p.cfg.Bucket, func(ctx context.Context) (err error) {
			s, err = js.Stream(ctx, "KV_"+p.cfg.Bucket)
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("cluster pauses: bucket %s: %w", p.cfg.Bucket, err)
	}
	return s.CachedInfo(), nil
}

// read applies one entry of the watch; what is no route's value is
// skipped.
func (p *Pauses) read(e natsjs.KeyValueEntry) {
	paused, gateway, err := decodePause(e.Key(), e.Operation(), e.Value())
	if err != nil {
		p.log.Warn("cluster pauses: an entry skipped", "bucket", p.cfg.Bucket, "revision", e.Revision(), "err", err)
		return
	}
	p.apply(e.Key(), e.Revision(), paused, gateway)
}

// decodePause reads a route's entry: a deleted one is no pause. An error
// says it is no route's value (its key no route name, its value too long
// or not a pause).
func decodePause(key string, op natsjs.KeyValueOp, value []byte) (paused bool, gateway string, err error) {
	if !pauseKeyPattern.MatchString(key) {
		return false, "", errors.New("a key that names no route")
	}
	if op == natsjs.KeyValueDelete || op == natsjs.KeyValuePurge {
		return false, "", nil
	}
	if len(value) > maxPauseEntry {
		return false, "", fmt.Errorf("route %s: a value of %d bytes", key, len(value))
	}
	var v pauseEntry
	if err := json.Unmarshal(value, &v); err != nil {
		return false, "", fmt.Errorf("route %s: %w", key, err)
	}
	return v.Paused, strings.ToValidUTF8(v.Gateway[:min(len(v.Gateway), 128)], "?"), nil
}

// seed writes to the bucket each route this gateway's store has paused
// that the bucket does not know (create-only: a value another gateway
// wrote meanwhile wins).
func (p *Pauses) seed(ctx context.Context, kv natsjs.KeyValue, known map[string]bool) {
	p.mu.Lock()
	to := p.to
	p.mu.Unlock()
	if to == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Wait)
	defer cancel()
	routes, err := to.StoredPauses(ctx)
	if err != nil {
		p.log.Warn("cluster pauses: cannot read the routes this gateway's store has paused", "err", err)
		return
	}
	for _, route := range routes {
		if known[route] || !pauseKeyPattern.MatchString(route) {
			continue
		}
		data, err := json.Marshal(pauseEntry{Paused: true, Gateway: p.cfg.Gateway, At: time.Now().UTC()})
		if err != nil {
			return
		}
		rev, err := kv.Create(ctx, route, data)
		switch {
		case errors.Is(err, natsjs.ErrKeyExists):
			continue // the watch brings the value
		case err != nil:
			p.log.Warn("cluster pauses: cannot write this gateway's pause to the bucket; the next watch tries again", "route", route, "err", err)
			continue
		}
		p.log.Info("route paused in this gateway's store and unknown to the cluster: now paused on every gateway", "route", route)
		p.apply(route, rev, true, p.cfg.Gateway)
	}
}
