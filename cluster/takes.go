package cluster

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/internal/startstop"
)

// TakesConfig configures NewTakes; zero values take the stated defaults.
type TakesConfig struct {
	// Gateway names this gateway in its records. Required.
	Gateway string
	// Bucket is the KV bucket (Deployment's Takes). Default
	// "HOOKGATE_TAKES".
	Bucket string
	// Replicas of the bucket. Default 1.
	Replicas int
	// JetStream returns the broker's current JetStream context (nil while
	// not connected).
	JetStream func() natsjs.JetStream
	// UntilElected, if set, ends the bucket's lookups after a failure at
	// its leader election.
	UntilElected UntilElected
	// TTL is how long a record counts after it was last read: a gateway
	// refreshes its records every TTL/3, and the bucket keeps a value TTL.
	// Default 1m.
	TTL time.Duration
	// Wait bounds each request to the bucket. Default 5s.
	Wait time.Duration
}

// DefaultTakesBucket is the default deployment's bucket of what each
// gateway's routes take.
const DefaultTakesBucket = "HOOKGATE_TAKES"

// takesEntry is a (route, gateway)'s value in the bucket.
type takesEntry struct {
	Gateway string   `json:"gateway"`
	Sources []string `json:"sources"`
	Events  []string `json:"events,omitempty"`
}

// maxTakesEntry bounds a value read from the bucket.
const maxTakesEntry = 64 << 10

// takesKey is route's key of gateway's record: the gateway's name
// base64url, as a key token.
func takesKey(route, gateway string) string {
	return route + "." + base64.RawURLEncoding.EncodeToString([]byte(gateway))
}

// heard is a record as read here, and when (this gateway's clock).
type heard struct {
	entry takesEntry
	at    time.Time
}

// Takes shares what each gateway's routes take (their sources and events)
// between the gateways of a deployment, which share each route's
// consumer: a gateway that pulls a message its own configuration does
// not take holds it (nak'd) while another live gateway's does take it, in
// a rolling change of the configuration. One key per (route, gateway),
// written before the route pulls (Announce), written again every TTL/3,
// deleted at Stop; every gateway watches the bucket. A record not
// refreshed for TTL (its gateway gone for good) no longer counts.
type Takes struct {
	cfg TakesConfig
	log *slog.Logger

	mu     sync.Mutex
	others map[string]map[string]heard // route → gateway → its record
	mine   map[string]takesEntry       // route → this gateway's record
	ready  bool                        // the watch read the bucket's values
	seen   uint64                      // the last revision the watch read
	put    uint64                      // the last revision this gateway wrote
	failed error                       // the last write's, if it failed

	bucket openBucket

	loop   startstop.Loop
	warned atomic.Int64
	wait   backoff
}

// NewTakes returns the shared records; Start runs the watch and the
// refresh.
func NewTakes(cfg TakesConfig, log *slog.Logger) (*Takes, error) {
	if cfg.Gateway == "" {
		return nil, errors.New("cluster takes: no gateway name")
	}
	if cfg.Bucket == "" {
		cfg.Bucket = DefaultTakesBucket
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	if cfg.TTL <= 0 {
		cfg.TTL = time.Minute
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 5 * time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Takes{cfg: cfg, log: log, others: map[string]map[string]heard{}, mine: map[string]takesEntry{},
		wait: newBackoff(cfg.UntilElected, "KV_"+cfg.Bucket)}, nil
}

// Start runs the watch and the refresh of this gateway's records.
func (t *Takes) Start(ctx context.Context) error {
	t.loop.Start(ctx, t.run)
	return nil
}

// Stop stops the watch and deletes this gateway's records (a gateway
// stopped cleanly takes nothing until it announces again).
func (t *Takes) Stop(ctx context.Context) error {
	t.loop.Stop()
	t.mu.Lock()
	routes := make([]string, 0, len(t.mine))
	for route := range t.mine {
		routes = append(routes, route)
	}
	clear(t.mine)
	t.mu.Unlock()
	if len(routes) == 0 {
		return nil
	}
	kv, err := t.open(ctx)
	if err != nil {
		t.log.Warn("cluster takes: this gateway's records not deleted; they count until their ttl", "err", err)
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, t.cfg.Wait)
	defer cancel()
	for _, route := range routes {
		if err := kv.Delete(ctx, takesKey(route, t.cfg.Gateway)); err != nil {
			t.log.Warn("cluster takes: a record not deleted; it counts until its ttl", "route", route, "err", err)
		}
	}
	return nil
}

// Announce writes what route takes here (sources, events) for the other
// gateways, and keeps it refreshed.
func (t *Takes) Announce(ctx context.Context, route string, sources, events []string) error {
	v := takesEntry{Gateway: t.cfg.Gateway, Sources: sources, Events: events}
	if err := t.write(ctx, route, v); err != nil {
		return err
	}
	t.mu.Lock()
	t.mine[route] = v
	t.mu.Unlock()
	return nil
}

// Elsewhere reports whether another gateway's live record of route
// satisfies match (its sources and events take the message), or, until
// the watch read the bucket's values or while it is behind this
// gateway's last write, whether it cannot tell: held then.
func (t *Takes) Elsewhere(route string, match func(sources, events []string) bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.ready || t.seen < t.put {
		return true
	}
	now := time.Now()
	for _, h := range t.others[route] {
		if now.Sub(h.at) < t.cfg.TTL && match(h.entry.Sources, h.entry.Events) {
			return true
		}
	}
	return false
}

// write writes route's record v, and keeps whether it failed (Check).
func (t *Takes) write(ctx context.Context, route string, v takesEntry) error {
	err := t.writeOnce(ctx, route, v)
	t.mu.Lock()
	t.failed = err
	t.mu.Unlock()
	return err
}

func (t *Takes) writeOnce(ctx context.Context, route string, v takesEntry) error {
	kv, err := t.open(ctx)
	if err != nil {
		return err
	}
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, t.cfg.Wait)
	defer cancel()
	var rev uint64
	err = whileNoLeader(ctx, func() (err error) {
		rev, err = kv.Put(ctx, takesKey(route, t.cfg.Gateway), data)
		return err
	})
	if err != nil {
		t.forget(kv)
		return fmt.Errorf("cluster takes: route %s: %w", route, err)
	}
	t.mu.Lock()
	t.put = max(t.put, rev)
	t.mu.Unlock()
	return nil
}

// open returns the bucket, created or updated to the config on a new
// connection.
func (t *Takes) open(ctx context.Context) (natsjs.KeyValue, error) {
	return t.bucket.get(ctx, t.cfg.JetStream(), "cluster takes", natsjs.KeyValueConfig{
		Bucket:      t.cfg.Bucket,
		Description: "hookgate: what each gateway's routes take",
		History:     1,
		TTL:         t.cfg.TTL,
		Replicas:    t.cfg.Replicas,
		Storage:     natsjs.FileStorage,
	}, t.cfg.Wait, t.cfg.UntilElected, t.log)
}

func (t *Takes) forget(kv natsjs.KeyValue) { t.bucket.forget(kv) }

// run watches the bucket and refreshes this gateway's records until
// stopped, starting again after any error.
func (t *Takes) run(ctx context.Context) {
	defer t.wait.end()
	for ctx.Err() == nil {
		t.wait.begin(ctx)
		read, err := t.watch(ctx)
		if ctx.Err() != nil {
			return
		}
		if read {
			t.wait.reset()
		}
		if err != nil && warnEvery(&t.warned, 30*time.Second) {
			t.log.Warn("cluster takes: cannot watch the bucket; trying again (meanwhile messages no route here takes are held)",
				"bucket", t.cfg.Bucket, "err", err)
		}
		if !t.wait.failed(ctx) {
			return
		}
	}
}

// watch reads the bucket's values, then every change, refreshing this
// gateway's records every TTL/3, until an error, a new connection, its
// own last write unread at the next refresh, or ctx ends.
func (t *Takes) watch(ctx context.Context) (read bool, err error) {
	kv, err := t.open(ctx)
	if err != nil {
		return false, err
	}
	js := t.cfg.JetStream()
	w, cancel, err := watchAll(ctx, kv, t.cfg.Wait)
	if err != nil {
		t.forget(kv)
		return false, fmt.Errorf("cluster takes: watch: %w", err)
	}
	defer cancel()
	defer func() { _ = w.Stop() }()
	t.mu.Lock()
	t.ready, t.seen = false, 0
	clear(t.others)
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.ready = false
		t.mu.Unlock()
	}()

	first := time.NewTimer(t.cfg.Wait)
	defer first.Stop()
	refresh := time.NewTicker(t.cfg.TTL / 3)
	defer refresh.Stop()
	for {
		select {
		case <-ctx.Done():
			return read, nil
		case <-first.C:
			if !read {
				return false, errors.New("cluster takes: the watch gave no values within " + t.cfg.Wait.String())
			}
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return read, errors.New("cluster takes: the watch ended")
			case e == nil:
				read = true
				t.mu.Lock()
				t.ready = true
				t.mu.Unlock()
			default:
				t.read(e)
			}
		case <-refresh.C:
			if t.cfg.JetStream() != js {
				return read, nil
			}
			t.mu.Lock()
			behind := t.seen < t.put
			mine := make(map[string]takesEntry, len(t.mine))
			for route, v := range t.mine {
				mine[route] = v
			}
			t.mu.Unlock()
			if behind {
				return read, errors.New("cluster takes: the watch has not read this gateway's last write")
			}
			for route, v := range mine {
				if err := t.write(ctx, route, v); err != nil {
					return read, err
				}
			}
		}
	}
}

// read keeps one entry of the watch; another gateway's only.
func (t *Takes) read(e natsjs.KeyValueEntry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seen = max(t.seen, e.Revision())
	route, _, ok := strings.Cut(e.Key(), ".")
	if !ok || route == "" {
		return
	}
	if e.Operation() != natsjs.KeyValuePut {
		for gw, h := range t.others[route] {
			if takesKey(route, gw) == e.Key() {
				delete(t.others[route], h.entry.Gateway)
			}
		}
		return
	}
	var v takesEntry
	if len(e.Value()) > maxTakesEntry || json.Unmarshal(e.Value(), &v) != nil || takesKey(route, v.Gateway) != e.Key() {
		t.log.Warn("cluster takes: an entry skipped", "bucket", t.cfg.Bucket, "key", e.Key(), "revision", e.Revision())
		return
	}
	if v.Gateway == t.cfg.Gateway {
		return
	}
	if t.others[route] == nil {
		t.others[route] = map[string]heard{}
	}
	t.others[route][v.Gateway] = heard{entry: v, at: time.Now()}
}
