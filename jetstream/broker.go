// Package jetstream is the broker: it runs an embedded nats-server (or
// connects to an external NATS), keeps the events stream in place with the
// consumers the deliveries declare (EnsureTopology), repairs a broken
// stream, and defines the event messages on it (subject, headers, MsgID).
// The relay (package relay) publishes to it; outbound consumes from it.
//
// JetStream carries the work; SQLite is the record. Everything the stream
// loses is published again from the store, so the embedded server's fsync
// interval is a speed setting, not a safety one.
package jetstream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/store"
)

// SubjectPrefix is the first token of every inbound event subject of the
// default deployment: webhooks.<source>.<event type tokens> (Scoped for
// another nats.stream).
const SubjectPrefix = "webhooks"

// TaskSubjectPrefix is the first token of task subjects: tasks.<type>
// (Scoped for another nats.stream).
const TaskSubjectPrefix = "tasks"

// EmbeddedMaxPayload is the embedded server's max payload: the largest
// message, headers included, it takes.
const EmbeddedMaxPayload = 8 << 20

// HeaderRoom is what a message may need beyond its event's body: the
// headers the relay adds (source, event ID, type, receipt time, sequence,
// Content-Type, Nats-Msg-Id) and the protocol's own. A body limit must
// leave it free below the broker's max payload.
const HeaderRoom = 16 << 10

// Config configures Connect. See config.NATS for the defaults.
type Config struct {
	URL             string // external NATS; empty runs the embedded server
	Port            int    // embedded server client port; 0: in-process only
	StoreDir        string // embedded server JetStream store
	SyncInterval    time.Duration
	SyncAlways      bool
	Stream          string
	DuplicateWindow time.Duration
	Replicas        int
	// Retention is "interest" (default: a message goes once every consumer
	// acknowledged it) or "limits" (every message is kept).
	Retention      string
	ConnectTimeout time.Duration
	// Name is the client connection name. Default "hookgate".
	Name string
	// RetireAfter is how long, on an external NATS, a route consumer this
	// gateway no longer declares is kept once nobody pulls from it.
	// Default RetireAfter (an hour).
	RetireAfter time.Duration
	// Auth is how the connection to an external NATS authenticates and
	// which TLS it uses beyond the URL's (auth.go).
	Auth Auth
}

// Broker is a NATS connection with JetStream, and the embedded server behind
// it when there is one. A connection NATS closes for good (nats.go does on
// some server errors, e.g. one it does not know) is replaced by a new one
// (see renew); every use goes through the broker's current connection.
type Broker struct {
	cfg  Config
	log  *slog.Logger
	subj subjects       // of cfg.Stream
	srv  *server.Server // nil with an external NATS
	url  string         // what the connection dials

	cur atomic.Pointer[link] // nil before Start

	connMu    sync.Mutex
	closing   bool          // the broker closes its connection itself
	done      chan struct{} // closed with closing: ends a renewal
	renews    sync.WaitGroup
	renewedAt time.Time     // when the last renewal connected
	renewWait time.Duration // the wait before the last renewal

	streamMu      sync.Mutex
	streamReady   bool
	streamCreated time.Time // the stream's creation time, as EnsureStream last saw it

	consumersMu sync.Mutex
	consumers   ConsumerSet // declared by the deliveries (Declare)

	// topoMu keeps the stream's updates and its consumers' creations
	// apart (taken after streamMu): nats-server reads the stream's
	// configuration unlocked while it makes a consumer, a data race with
	// an update in the same process.
	topoMu sync.Mutex

	elections elections // JetStream's leader elections (elected.go)

	lifeMu  sync.Mutex
	started bool
	stopped bool
}

// New returns a broker for cfg; Start connects it.
func New(cfg Config, log *slog.Logger) *Broker {
	if cfg.Name == "" {
		cfg.Name = "hookgate"
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	if cfg.Stream == "" {
		cfg.Stream = DefaultStream
	}
	if cfg.RetireAfter <= 0 {
		cfg.RetireAfter = RetireAfter
	}
	if cfg.DuplicateWindow <= 0 {
		cfg.DuplicateWindow = 20 * time.Second
	}
	return &Broker{cfg: cfg, log: log, subj: subjectsOf(cfg.Stream)}
}

// Connect is New and Start.
func Connect(ctx context.Context, cfg Config, log *slog.Logger) (*Broker, error) {
	b := New(cfg, log)
	if err := b.Start(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// Start starts the embedded server when cfg.URL is empty, connects, and
// makes sure the events stream exists. With an external NATS that is down,
// Start still succeeds: the connection keeps retrying and the stream is
// created once NATS answers (see EnsureStream). A failed Start leaves
// nothing running; starting a started broker does nothing, and a stopped
// one does not start again.
func (b *Broker) Start(ctx context.Context) error {
	b.lifeMu.Lock()
	defer b.lifeMu.Unlock()
	switch {
	case b.stopped:
		return errors.New("jetstream: the broker was stopped")
	case b.started:
		return nil
	}
	if err := b.start(ctx); err != nil {
		b.shutdown()
		return err
	}
	b.started = true
	return nil
}

// link is a connection and its JetStream context.
type link struct {
	nc *nats.Conn
	js natsjs.JetStream
}

func (b *Broker) start(ctx context.Context) error {
	cfg := b.cfg
	b.connMu.Lock()
	b.closing = false
	b.done = make(chan struct{})
	b.connMu.Unlock()
	b.url = cfg.URL
	if b.url == "" {
		srv, err := startServer(cfg, b.log)
		if err != nil {
			return err
		}
		b.srv = srv
		b.url = srv.ClientURL()
	}
	l, err := b.dialCtx(ctx)
	if err != nil {
		return err
	}
	b.cur.Store(l)
	if l.nc.IsClosed() { // closed before it was current
		b.closed(l.nc)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	if err := b.EnsureStream(ctx); err != nil {
		if b.srv != nil {
			return err
		}
		b.log.Warn("nats not ready; stream will be created when it is", "err", err)
	}
	return nil
}

// dial connects to b.url (the embedded server in process) with a
// JetStream context. With an external NATS that is down it succeeds: the
// connection keeps retrying.
func (b *Broker) dial() (*link, error) {
	cfg, log := b.cfg, b.log
	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(true),
		// Nothing is held for the next server while disconnected: a held
		// message over that server's max payload would get an -ERR, on
		// which nats.go closes the connection for good. Publishes fail at
		// once instead; the relay retries them, acks are redelivered.
		nats.ReconnectBufSize(-1),
		nats.Timeout(cfg.ConnectTimeout),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("nats reconnected", "server", serverOf(nc)) }),
		// Asynchronous errors (a slow consumer, an ordered consumer
		// reset) go to the log, not to nats.go's default: stderr; the
		// advisories refused to the user are said once (elected.go).
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if b.elections.refused(err, log) {
				return
			}
			if sub != nil {
				log.Warn("nats async error", "err", err, "subject", sub.Subject)
				return
			}
			log.Warn("nats async error", "err", err)
		}),
		nats.ClosedHandler(b.closed),
	}
	if b.srv != nil {
		opts = append(opts, nats.InProcessServer(b.srv))
	} else {
		auth, err := cfg.Auth.options()
		if err != nil {
			return nil, fmt.Errorf("jetstream: %w", err)
		}
		opts = append(opts, auth...)
		// A connection still connecting when made (the server down or
		// refusing) says when it connects.
		opts = append(opts, nats.ConnectHandler(func(nc *nats.Conn) { log.Info("nats connected", "server", serverOf(nc)) }))
	}
	nc, err := nats.Connect(b.url, opts...)
	if err != nil {
		return nil, fmt.Errorf("jetstream: connect: %w", hideURL(err))
	}
	if b.srv == nil {
		if err := b.elections.watch(nc); err != nil {
			log.Warn("nats: leader elections not watched; requests to a group without a leader wait out their timeout", "err", err)
		}
	}
	js, err := natsjs.New(nc,
		natsjs.WithPublishAsyncMaxPending(1024),
		natsjs.WithPublishAsyncTimeout(5*time.Second),
		natsjs.WithDefaultTimeout(5*time.Second))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return &link{nc: nc, js: js}, nil
}

// serverOf is the host:port of the server nc is connected to, for the
// log: the URL's userinfo may be a token (nats://TOKEN@host), which
// nats.go's redacted URL still shows.
func serverOf(nc *nats.Conn) string {
	u, err := url.Parse(nc.ConnectedUrl())
	if err != nil {
		return ""
	}
	return u.Host
}

// dialCtx is dial, given up once ctx is done: nats.go's connect takes no
// context, and a server that accepts but does not answer holds it for
// the connect timeout. A connection made after that is closed.
func (b *Broker) dialCtx(ctx context.Context) (*link, error) {
	type dialed struct {
		l   *link
		err error
	}
	ch := make(chan dialed, 1)
	go func() {
		l, err := b.dial()
		ch <- dialed{l, err}
	}()
	select {
	case d := <-ch:
		return d.l, d.err
	case <-ctx.Done():
		go func() {
			if d := <-ch; d.err == nil {
				d.l.nc.Close()
			}
		}()
		return nil, fmt.Errorf("jetstream: connect: %w", ctx.Err())
	}
}

// hideURL masks the URL of a *url.Error in err (a server nats.go could
// not parse): it may carry a token or password.
func hideURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = "****"
	}
	return err
}

// closed runs when a connection is closed. One the broker did not close
// itself, and still its current one, was closed by NATS for good (nats.go
// does on an -ERR it does not know, a too-long control line, and some
// others): nothing would be published, fetched or acked through it again,
// so renew replaces it.
func (b *Broker) closed(nc *nats.Conn) {
	b.connMu.Lock()
	if b.closing {
		b.connMu.Unlock()
		return
	}
	old := b.cur.Load()
	if old == nil || old.nc != nc {
		b.connMu.Unlock()
		return
	}
	// A connection closed soon after the last renewal waits longer
	// before the next: a server that closes every connection is not
	// dialled in a loop.
	wait := time.Duration(0)
	if !b.renewedAt.IsZero() && time.Since(b.renewedAt) < renewCalm {
		wait = min(max(2*b.renewWait, renewMinWait), renewMaxWait)
	}
	b.renewWait = wait
	b.renews.Add(1)
	done := b.done
	b.connMu.Unlock()
	b.log.Error("nats closed the connection for good; connecting anew", "err", nc.LastError(), "in", wait)
	go b.renew(old, done, wait)
}

// The backoff of renew: from renewMinWait doubling to renewMaxWait, also
// across renewals less than renewCalm apart.
const (
	renewMinWait = 250 * time.Millisecond
	renewMaxWait = 10 * time.Second
	renewCalm    = time.Minute
)

// renew connects anew after wait, retrying with a backoff until it
// succeeds or the broker stops, and puts the new connection in old's place.
func (b *Broker) renew(old *link, done <-chan struct{}, wait time.Duration) {
	defer b.renews.Done()
	for {
		if wait > 0 {
			select {
			case <-done:
				return
			case <-time.After(wait):
			}
		}
		l, err := b.dial()
		if err == nil {
			b.connMu.Lock()
			if b.closing || !b.cur.CompareAndSwap(old, l) {
				b.connMu.Unlock()
				l.nc.Close()
				return
			}
			b.renewedAt = time.Now()
			b.connMu.Unlock()
			if l.nc.IsClosed() {
				// Closed before it took old's place, so its ClosedHandler
				// found it not current and left it: replace it too. (Should
				// the handler also start a renewal, the one that loses the
				// swap closes what it dialled.)
				old = l
				wait = min(max(2*wait, renewMinWait), renewMaxWait)
				b.log.Warn("nats: the new connection was closed at once; retrying", "err", l.nc.LastError(), "in", wait)
				continue
			}
			if b.srv != nil {
				b.log.Info("nats connected anew to the embedded server")
			} else if l.nc.IsConnected() {
				b.log.Info("nats connected anew", "server", serverOf(l.nc))
			} else {
				b.log.Info("nats connection made anew; still connecting", "status", l.nc.Status().String())
			}
			return
		}
		wait = min(max(2*wait, renewMinWait), renewMaxWait)
		b.log.Warn("nats: connecting anew failed; retrying", "err", err, "in", wait)
	}
}

// js is the current JetStream context; nil before Start.
func (b *Broker) js() natsjs.JetStream {
	if l := b.cur.Load(); l != nil {
		return l.js
	}
	return nil
}

// nc is the current connection; nil before Start.
func (b *Broker) nc() *nats.Conn {
	if l := b.cur.Load(); l != nil {
		return l.nc
	}
	return nil
}

// startServer runs the embedded nats-server with JetStream and waits until
// it takes connections. A JetStream that fails to start is an error.
func startServer(cfg Config, log *slog.Logger) (*server.Server, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("jetstream: embedded server needs a store directory")
	}
	if err := os.MkdirAll(cfg.StoreDir, 0o750); err != nil {
		return nil, fmt.Errorf("jetstream: create store directory: %w", err)
	}
	opts := &server.Options{
		ServerName:   "hookgate",
		JetStream:    true,
		StoreDir:     cfg.StoreDir,
		SyncInterval: cfg.SyncInterval,
		SyncAlways:   cfg.SyncAlways,
		NoSigs:       true,
		NoLog:        false,
		MaxPayload:   EmbeddedMaxPayload,
	}
	if cfg.Port > 0 {
		opts.Host = "127.0.0.1"
		opts.Port = cfg.Port
	} else {
		opts.DontListen = true
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("jetstream: embedded server: %w", err)
	}
	srv.SetLoggerV2(serverLogger{log.With("component", "nats-server")}, false, false, false)
	srv.Start()
	if !srv.ReadyForConnections(cfg.ConnectTimeout) {
		srv.Shutdown()
		return nil, fmt.Errorf("jetstream: embedded server not ready after %s", cfg.ConnectTimeout)
	}
	if !srv.JetStreamEnabled() {
		srv.Shutdown()
		return nil, fmt.Errorf("jetstream: embedded server started without JetStream (store %s)", cfg.StoreDir)
	}
	return srv, nil
}

// EnsureStream creates or updates the events stream. It is cheap once the
// stream is known to exist; call Reset after a failure that suggests the
// stream is gone.
func (b *Broker) EnsureStream(ctx context.Context) error {
	b.streamMu.Lock()
	defer b.streamMu.Unlock()
	if b.streamReady {
		return nil
	}
	sc := natsjs.StreamConfig{
		Name:       b.cfg.Stream,
		Subjects:   []string{b.subj.events + ".>", b.subj.tasks + ".>"},
		Storage:    natsjs.FileStorage,
		Retention:  natsjs.InterestPolicy,
		Duplicates: b.cfg.DuplicateWindow,
		Replicas:   max(b.cfg.Replicas, 1),
	}
	if b.cfg.Retention == "limits" {
		sc.Retention = natsjs.LimitsPolicy
	}
	b.topoMu.Lock()
	defer b.topoMu.Unlock()
	// An update (of a stream that may have no leader) is given up at the
	// stream's leader election and made again; a creation is not, which
	// elects its first, but what it made is updated at an election before
	// it answers (untilMade).
	update := func(uctx context.Context) (natsjs.Stream, error) { return b.js().UpdateStream(uctx, sc) }
	s, err := untilAnswered(ctx, b, func(uctx context.Context) (natsjs.Stream, error) {
		if err := b.dropUnscoped(uctx); err != nil {
			return nil, err
		}
		return update(uctx)
	})
	if errors.Is(err, natsjs.ErrStreamNotFound) {
		s, err = untilMade(ctx, b, func(cctx context.Context) (natsjs.Stream, error) {
			return b.js().CreateStream(cctx, sc)
		}, update)
		if errors.Is(err, natsjs.ErrStreamNameAlreadyInUse) {
			s, err = untilAnswered(ctx, b, update) // another gateway made it meanwhile
		}
	}
	if err != nil {
		return fmt.Errorf("jetstream: stream %s: %w", sc.Name, err)
	}
	b.streamReady = true
	b.streamCreated = s.CachedInfo().Created
	return nil
}

// dropUnscoped deletes the events stream of another nats.stream than the
// default one if it still has the default deployment's subjects (made by
// a version that did not scope them): the routes' consumers cannot take
// its messages under the new subjects. It is made anew, and the relay's
// recovery publishes again from the store what the routes still owe, as
// for any stream made anew.
func (b *Broker) dropUnscoped(ctx context.Context) error {
	if b.subj.events == SubjectPrefix {
		return nil
	}
	s, err := b.js().Stream(ctx, b.cfg.Stream)
	if errors.Is(err, natsjs.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("jetstream: stream %s: %w", b.cfg.Stream, err)
	}
	if !slices.Contains(s.CachedInfo().Config.Subjects, SubjectPrefix+".>") {
		return nil
	}
	if err := b.js().DeleteStream(ctx, b.cfg.Stream); err != nil && !errors.Is(err, natsjs.ErrStreamNotFound) {
		return fmt.Errorf("jetstream: stream %s of unscoped subjects: delete: %w", b.cfg.Stream, err)
	}
	b.log.Warn("the events stream had the default deployment's subjects; made anew with this deployment's, what the routes still owe is published again from the store",
		"stream", b.cfg.Stream, "subjects", b.subj.events+".>, "+b.subj.tasks+".>")
	return nil
}

// MaxPayload is the largest message the broker takes, headers included:
// EmbeddedMaxPayload for the embedded server, else what the external
// server announced at connect (0 while it has not been reached).
func (b *Broker) MaxPayload() int64 {
	if b.srv != nil {
		return EmbeddedMaxPayload
	}
	nc := b.nc()
	if nc == nil || !nc.IsConnected() {
		return 0
	}
	return nc.MaxPayload()
}

// StreamHealth is nil unless the embedded server reports the events
// stream broken (e.g. a write error of its store); an external server's
// stream is not checked here.
func (b *Broker) StreamHealth() error {
	if b.srv == nil {
		return nil
	}
	h := b.srv.Healthz(&server.HealthzOptions{Account: server.DEFAULT_GLOBAL_ACCOUNT, Stream: b.cfg.Stream})
	if h.StatusCode == 200 && h.Error == "" {
		return nil
	}
	return fmt.Errorf("stream %s unhealthy: %s", b.cfg.Stream, hidePaths(h.Error))
}

// pathRE matches a file path in a server's error text: absolute, or
// relative (the default data_dir is ./data) with a slash in it.
var pathRE = regexp.MustCompile(`[^\s'":]*/[^\s'":]+`)

// hidePaths replaces the file paths in s (a store's write error names its
// file) by "<path>": /readyz/delivery answers without a token.
func hidePaths(s string) string { return pathRE.ReplaceAllString(s, "<path>") }

// Repair puts a broken events stream of the embedded server back in
// service, and reports whether it did. A stream whose store failed a
// write (a full disk, its directory removed) refuses every write until it
// is loaded again, and the server does not do it by itself: the stream is
// deleted, so that the next EnsureStream creates it anew (the caller then
// creates the consumers again and publishes from the store what the stream
// lost). A healthy stream, or an external server's, is left alone.
func (b *Broker) Repair(ctx context.Context) (bool, error) {
	if b.srv == nil {
		return false, nil
	}
	health := b.StreamHealth()
	if health == nil {
		return false, nil
	}
	b.log.Warn("the events stream is broken; deleting it to create it again", "err", health)
	b.ForgetStream()
	if err := b.js().DeleteStream(ctx, b.cfg.Stream); err != nil && !errors.Is(err, natsjs.ErrStreamNotFound) {
		return false, fmt.Errorf("jetstream: delete broken stream %s: %w", b.cfg.Stream, err)
	}
	return true, nil
}

// JetStream returns the current JetStream client: after NATS closed a
// connection for good, the one of the new connection. Ask again rather
// than keep it (and the consumers got through it) across failures.
func (b *Broker) JetStream() natsjs.JetStream { return b.js() }

// Conn returns the current NATS connection (see JetStream).
func (b *Broker) Conn() *nats.Conn { return b.nc() }

// Stream is the events stream's name.
func (b *Broker) Stream() string { return b.cfg.Stream }

// Stop drains nothing: it closes the connection and shuts the embedded
// server down. Safe to call twice, and before or without Start.
func (b *Broker) Stop(context.Context) error {
	b.lifeMu.Lock()
	defer b.lifeMu.Unlock()
	if b.stopped {
		return nil
	}
	b.stopped = true
	b.shutdown()
	return nil
}

// Close is Stop, for callers without a context.
func (b *Broker) Close() { _ = b.Stop(context.Background()) }

// shutdown closes what start opened, and ends a renewal of the
// connection.
func (b *Broker) shutdown() {
	b.connMu.Lock()
	if !b.closing {
		b.closing = true
		if b.done != nil {
			close(b.done)
		}
	}
	b.connMu.Unlock()
	b.renews.Wait()
	if nc := b.nc(); nc != nil {
		_ = nc.FlushTimeout(2 * time.Second) // acks and naks already sent
		nc.Close()
	}
	if b.srv != nil {
		b.srv.Shutdown()
		b.srv.WaitForShutdown()
	}
}

// HandBack gives msg back to its consumer to be delivered again at once,
// and returns once the server has taken it in. A plain NAK only queues the
// message again in the server's memory: across a restart the message keeps
// its last delivery time and waits out its AckWait. A NAK with a delay
// (here 1ns) moves that time back, which the consumer's stored state keeps.
// The NAK is sent as a request, answered once the consumer processed it,
// so a shutdown right after it cannot drop it.
func (b *Broker) HandBack(ctx context.Context, msg natsjs.Msg) error {
	if msg.Reply() == "" {
		return errors.New("hand back: the message has no ack subject")
	}
	if _, err := b.nc().RequestWithContext(ctx, msg.Reply(), handBackNak); err != nil {
		return fmt.Errorf("hand back: %w", err)
	}
	return nil
}

var handBackNak = []byte(`-NAK {"delay": 1}`)

// maxSubjectType is the longest type part of a subject. A longer one (a
// type stored before types were bounded at intake, or one of many dots) is
// replaced by a hash token: NATS closes the connection of a client whose
// control line (subject included) passes 4 KiB.
const maxSubjectType = 255

// Subject returns the subject of an event in the default deployment's
// stream (SubjectIn another's): webhooks.<source>.<type>, each
// dot-separated part of the type made a valid subject token ('_' for an
// empty type or part; characters other than letters, digits, '-' and '_'
// become '_'). When that type part would be longer than 255 bytes it is
// one token instead, "_h_" and the first 16 bytes of the type's SHA-256 in
// hex: the subject stays under webhooks.<source>.>, where the routes'
// consumers take it, and routes match event filters on the exact type,
// which travels in the message's header.
//
// Tasks (source store.TaskSource) go to tasks.<type> instead.
func Subject(source, eventType string) string {
	return subject(subjects{SubjectPrefix, TaskSubjectPrefix}, source, eventType)
}

// SubjectIn is Subject in the events stream stream: its first token
// Scoped.
func SubjectIn(stream, source, eventType string) string {
	return subject(subjectsOf(stream), source, eventType)
}

func subject(subj subjects, source, eventType string) string {
	var sb strings.Builder
	sb.Grow(len(subj.events) + len(source) + min(len(eventType), maxSubjectType) + 3)
	if source == store.TaskSource {
		sb.WriteString(subj.tasks)
	} else {
		sb.WriteString(subj.events)
		sb.WriteByte('.')
		sb.WriteString(source)
	}
	sb.WriteByte('.')
	if eventType == "" {
		sb.WriteByte('_')
		return sb.String()
	}
	typeStart := sb.Len()
	tokenStart := true
	for i := 0; i < len(eventType); i++ {
		if sb.Len()-typeStart > maxSubjectType {
			break // hashed below
		}
		c := eventType[i]
		switch {
		case c == '.':
			if tokenStart {
				sb.WriteByte('_')
			}
			sb.WriteByte('.')
			tokenStart = true
			continue
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			sb.WriteByte(c)
		default:
			sb.WriteByte('_')
		}
		tokenStart = false
	}
	if tokenStart {
		sb.WriteByte('_')
	}
	if sb.Len()-typeStart > maxSubjectType {
		sum := sha256.Sum256([]byte(eventType))
		return sb.String()[:typeStart] + "_h_" + hex.EncodeToString(sum[:16])
	}
	return sb.String()
}

// serverLogger routes nats-server's log to slog.
type serverLogger struct{ log *slog.Logger }

func (l serverLogger) Noticef(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l serverLogger) Warnf(format string, v ...any)   { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l serverLogger) Fatalf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l serverLogger) Errorf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l serverLogger) Debugf(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l serverLogger) Tracef(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
