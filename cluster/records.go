package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/internal/startstop"
	"github.com/hookgate/hookgate/store"
)

// RecordsConfig configures NewRecords; zero values take the stated
// defaults.
type RecordsConfig struct {
	// Gateway names this gateway in the records it publishes (its cluster
	// claims' name). Required.
	Gateway string
	// Stream is the records stream (Deployment's Records). Default
	// "HOOKGATE_RECORDS".
	Stream string
	// Subject is the first tokens of the stream's subjects, each record's
	// <Subject>.<kind> (Deployment's RecordsSubject). Default
	// "hookgate.records", the store's record subjects.
	Subject string
	// Replicas of the stream. Default 1.
	Replicas int
	// TTL is how long the stream keeps a record (its MaxAge). Required.
	TTL time.Duration
	// JetStream returns the broker's current JetStream context (nil while
	// not connected).
	JetStream func() natsjs.JetStream
	// UntilElected, if set, cuts the stream's lookup short at its leader
	// election, where a creation not answered yet looks up what was made.
	UntilElected UntilElected
	// Batch is the most records published or applied at once. Default 256.
	Batch int
	// Poll is how often records_out is read without a Notify. Default 1s.
	Poll time.Duration
	// Registerer, if set, takes the metrics.
	Registerer prometheus.Registerer
}

// Defaults of RecordsConfig.
const (
	DefaultRecordsStream = "HOOKGATE_RECORDS"
	recordsPrefix        = "hookgate"
	recordsToken         = "records"
	// storeRecords is the default deployment's Subject, the store's
	// subjects' (store.EventRecordSubject and the others).
	storeRecords      = recordsPrefix + "." + recordsToken
	recordsDuplicates = 2 * time.Minute
	// HeaderRecord carries an event record's JSON; the body is the data.
	HeaderRecord = "Hookgate-Record"
)

// RecordsStore is what Records needs of the store.
type RecordsStore interface {
	RecordsOut(ctx context.Context, limit int) ([]store.OutRecord, error)
	DeleteRecordsOut(ctx context.Context, ids []int64) error
	CountRecordsOut(ctx context.Context) (int64, error)
	ApplyRecords(ctx context.Context, recs []store.Record, through uint64) error
	RecordsPosition(ctx context.Context) (uint64, error)
	RecordsStream(ctx context.Context) (string, error)
	SetRecordsStream(ctx context.Context, created string, reset bool) error
	EventBySeq(ctx context.Context, seq int64) (*store.Event, error)
	TaskScope(ctx context.Context, id string) (string, error)
}

// Records makes every gateway's store a replica of the cluster's record.
// Each event's holder publishes its record (PublishEventRecord, before
// the event itself) and each round's record is written in records_out
// with the round (store.RecordClusterRound), as is each operator's reset
// with the local reset (store.StateRecord), and published from there,
// deleted on its PubAck; every gateway applies the other gateways'
// records from the stream, in order, from the sequence after the last one
// it applied (kept in its store with what it applied).
type Records struct {
	cfg   RecordsConfig
	store RecordsStore
	log   *slog.Logger

	wake       chan struct{}
	pubLoop    startstop.Loop
	applyLoop  startstop.Loop
	ensureMu   sync.Mutex
	ensuredJS  natsjs.JetStream // the context the stream was last made or updated with
	warnedGap  atomic.Bool
	published  prometheus.Counter
	applied    prometheus.Counter
	missed     prometheus.Counter
	pubWarned  atomic.Int64 // unix ms of the last warning of the publisher
	followWarn atomic.Int64 // and of the applier
	pubWait    backoff      // the publisher's after a failure
	followWait backoff      // and the applier's
}

// NewRecords returns the replication of records between the gateways;
// Start runs it.
func NewRecords(st RecordsStore, cfg RecordsConfig, log *slog.Logger) (*Records, error) {
	if cfg.Gateway == "" {
		return nil, errors.New("cluster records: no gateway name")
	}
	if cfg.TTL <= 0 {
		return nil, errors.New("cluster records: no ttl")
	}
	if cfg.Stream == "" {
		cfg.Stream = DefaultRecordsStream
	}
	if cfg.Subject == "" {
		cfg.Subject = storeRecords
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 256
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	r := &Records{cfg: cfg, store: st, log: log, wake: make(chan struct{}, 1),
		pubWait: newBackoff(cfg.UntilElected, cfg.Stream), followWait: newBackoff(cfg.UntilElected, cfg.Stream),
		published: prometheus.NewCounter(prometheus.CounterOpts{Name: "hookgate_cluster_records_published_total",
			Help: "Records (events and delivery rounds) this gateway published to the records stream."}),
		applied: prometheus.NewCounter(prometheus.CounterOpts{Name: "hookgate_cluster_records_applied_total",
			Help: "Records of other gateways applied to this gateway's store."}),
		missed: prometheus.NewCounter(prometheus.CounterOpts{Name: "hookgate_cluster_records_missed_total",
			Help: "Records the stream no longer held when this gateway came to read them (away longer than cluster.records_ttl)."}),
	}
	if cfg.Registerer != nil {
		if err := errors.Join(cfg.Registerer.Register(r.published), cfg.Registerer.Register(r.applied),
			cfg.Registerer.Register(r.missed)); err != nil {
			return nil, fmt.Errorf("cluster records: metrics: %w", err)
		}
	}
	return r, nil
}

// Ensure creates the records stream (logged), or updates it to the
// config.
func (r *Records) Ensure(ctx context.Context) error {
	js := r.cfg.JetStream()
	if js == nil {
		return errors.New("cluster records: not connected to nats")
	}
	r.ensureMu.Lock()
	defer r.ensureMu.Unlock()
	if r.ensuredJS == js {
		return nil
	}
	cfg := natsjs.StreamConfig{
		Name:        r.cfg.Stream,
		Description: "hookgate: every gateway's events and delivery rounds, applied by every gateway",
		Subjects:    []string{r.cfg.Subject + ".>"},
		Retention:   natsjs.LimitsPolicy,
		Storage:     natsjs.FileStorage,
		Replicas:    r.cfg.Replicas,
		MaxAge:      r.cfg.TTL,
		Duplicates:  min(recordsDuplicates, r.cfg.TTL), // JetStream refuses a window past MaxAge
	}
	// The update of a stream without a leader is given up at its election
	// and made again; a creation is not, which elects its first leader,
	// but at an election before it answers the stream is updated
	// (jetstream.Made).
	update := func(uctx context.Context) error {
		_, err := js.UpdateStream(uctx, cfg)
		return err
	}
	err := r.cfg.UntilElected.answered(ctx, r.cfg.Stream, update)
	if errors.Is(err, natsjs.ErrStreamNotFound) {
		_, err = made(ctx, r.cfg.UntilElected, r.cfg.Stream, func(cctx context.Context) (natsjs.Stream, error) {
			return js.CreateStream(cctx, cfg)
		}, func(uctx context.Context) (natsjs.Stream, error) {
			return js.UpdateStream(uctx, cfg)
		})
		switch {
		case err == nil:
			r.log.Info("cluster records: stream created", "stream", r.cfg.Stream, "ttl", r.cfg.TTL, "replicas", r.cfg.Replicas)
		case errors.Is(err, natsjs.ErrStreamNameAlreadyInUse):
			err = r.cfg.UntilElected.answered(ctx, r.cfg.Stream, update) // another gateway made it meanwhile
		}
	}
	if err != nil {
		return fmt.Errorf("cluster records: stream %s: %w", r.cfg.Stream, err)
	}
	r.ensuredJS = js
	return nil
}

// forget makes the next Ensure ask the server again.
func (r *Records) forget() {
	r.ensureMu.Lock()
	r.ensuredJS = nil
	r.ensureMu.Unlock()
}

// Start runs the publisher of records_out and the applier of the stream.
func (r *Records) Start(ctx context.Context) error {
	r.pubLoop.Start(ctx, r.publishLoop)
	r.applyLoop.Start(ctx, r.followLoop)
	return nil
}

// Stop stops both loops; what is not published stays in records_out.
func (r *Records) Stop(context.Context) error {
	r.applyLoop.Stop()
	r.pubLoop.Stop()
	return nil
}

// Notify wakes the publisher: a round's record was written.
func (r *Records) Notify() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// PublishEventRecord publishes the record of ev, an event this gateway
// holds the claim of, with its headers (and, for a task, its owner) from
// the store, under a Nats-Msg-Id of its own: a repeat is harmless.
func (r *Records) PublishEventRecord(ev *store.Event) (natsjs.PubAckFuture, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Ensure(ctx); err != nil {
		return nil, err
	}
	full, err := r.store.EventBySeq(ctx, ev.Seq)
	if err != nil {
		return nil, fmt.Errorf("event record %s/%s: %w", ev.Source, ev.ID, err)
	}
	rec := store.EventRecord{Origin: r.cfg.Gateway, Source: full.Source, ID: full.ID, Type: full.Type,
		ContentType: full.ContentType, Headers: full.Headers, ReceivedAt: full.ReceivedAt.UnixMilli()}
	if !json.Valid(rec.Headers) {
		rec.Headers = nil
	}
	if full.Source == store.TaskSource {
		if rec.Scope, err = r.store.TaskScope(ctx, full.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("event record %s/%s: %w", ev.Source, ev.ID, err)
		}
	}
	meta, err := json.Marshal(&rec)
	if err != nil {
		return nil, err
	}
	js := r.cfg.JetStream()
	if js == nil {
		return nil, errors.New("cluster records: not connected to nats")
	}
	msg := &nats.Msg{Subject: r.subject(store.EventRecordSubject), Header: nats.Header{}, Data: full.Body}
	msg.Header.Set(HeaderRecord, string(meta))
	f, err := js.PublishMsgAsync(msg, natsjs.WithMsgID("event:"+Key(full.Source, full.ID)))
	if err != nil {
		return nil, fmt.Errorf("event record %s/%s: %w", ev.Source, ev.ID, err)
	}
	r.published.Inc()
	return f, nil
}

// warnEvery rate-limits a loop's warnings.
func warnEvery(last *atomic.Int64, every time.Duration) bool {
	now := time.Now().UnixMilli()
	prev := last.Load()
	return now-prev >= every.Milliseconds() && last.CompareAndSwap(prev, now)
}

// publishLoop publishes records_out until stopped, deleting each record
// on its PubAck; after a failure it waits (pubWait) until the stream's
// next leader election at the latest.
func (r *Records) publishLoop(ctx context.Context) {
	defer r.pubWait.end()
	poll := time.NewTimer(0)
	defer poll.Stop()
	for ctx.Err() == nil {
		r.pubWait.begin(ctx)
		n, err := r.publishOut(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			if warnEvery(&r.pubWarned, 30*time.Second) {
				r.log.Warn("cluster records: cannot publish round records; they wait in the store", "err", err)
			}
			if !r.pubWait.failed(ctx) {
				return
			}
			continue
		case n == r.cfg.Batch:
			continue
		}
		r.pubWait.reset()
		poll.Reset(r.cfg.Poll)
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-poll.C:
		}
	}
}

// publishOut publishes one batch of records_out; n is the batch's size.
func (r *Records) publishOut(ctx context.Context) (n int, err error) {
	recs, err := r.store.RecordsOut(ctx, r.cfg.Batch)
	if err != nil || len(recs) == 0 {
		return 0, err
	}
	ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = r.Ensure(ectx)
	cancel()
	if err != nil {
		return 0, err
	}
	js := r.cfg.JetStream()
	if js == nil {
		return 0, errors.New("cluster records: not connected to nats")
	}
	futures := make([]natsjs.PubAckFuture, 0, len(recs))
	for _, rec := range recs {
		f, err := js.PublishMsgAsync(&nats.Msg{Subject: r.subject(rec.Subject), Data: rec.Data}, natsjs.WithMsgID(rec.MsgID))
		if err != nil {
			break
		}
		futures = append(futures, f)
	}
	var acked []int64
	wait := time.NewTimer(10 * time.Second)
	defer wait.Stop()
	var ferr error
	for i, f := range futures {
		select {
		case <-f.Ok():
			acked = append(acked, recs[i].ID)
			continue
		case e := <-f.Err():
			ferr = e
		case <-wait.C:
			ferr = errors.New("no ack within 10s")
		case <-ctx.Done():
			ferr = ctx.Err()
		}
		break
	}
	if ferr != nil {
		r.forget() // the stream may be gone: made again at the next try
	}
	if err := r.store.DeleteRecordsOut(context.WithoutCancel(ctx), acked); err != nil {
		return 0, err
	}
	r.published.Add(float64(len(acked)))
	if ferr == nil && len(futures) < len(recs) {
		ferr = errors.New("publish failed")
	}
	if ferr != nil {
		return len(acked), fmt.Errorf("cluster records: publish: %w", ferr)
	}
	return len(recs), nil
}

// followLoop applies the records stream until stopped, starting again
// from the store's position after any error: after a wait (followWait)
// that ends at the stream's next leader election at the latest.
func (r *Records) followLoop(ctx context.Context) {
	defer r.followWait.end()
	for ctx.Err() == nil {
		r.followWait.begin(ctx)
		err := r.follow(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil && warnEvery(&r.followWarn, 30*time.Second) {
			r.log.Warn("cluster records: cannot read the records stream; trying again", "err", err)
		}
		if !r.followWait.failed(ctx) {
			return
		}
	}
}

// stream looks the records stream up, the lookup given up at its leader
// election and made again (see UntilElected).
func (r *Records) stream(ctx context.Context, js natsjs.JetStream) (s natsjs.Stream, err error) {
	err = r.cfg.UntilElected.answered(ctx, r.cfg.Stream, func(ctx context.Context) error {
		s, err = js.Stream(ctx, r.cfg.Stream)
		return err
	})
	return s, err
}

// position is where to read the records stream info from, pos applied:
// from its start if it was made anew since (another creation time than
// the store noted with its position, or behind pos), noting the new one
// and the position 0 together.
func (r *Records) position(ctx context.Context, info *natsjs.StreamInfo, pos uint64) (uint64, error) {
	created := info.Created.UTC().Format(time.RFC3339Nano)
	noted, err := r.store.RecordsStream(ctx)
	if err != nil {
		return 0, err
	}
	anew := noted != "" && noted != created
	if last := info.State.LastSeq; anew || last < pos {
		r.log.Warn("cluster records: the records stream was made anew since this gateway applied from it; reading it from its start",
			"applied", pos, "stream_last", last, "created", created, "was", noted)
		return 0, r.store.SetRecordsStream(ctx, created, true)
	}
	if noted == "" {
		return pos, r.store.SetRecordsStream(ctx, created, false)
	}
	return pos, nil
}

// follow reads the stream with an ordered consumer from the sequence
// after the store's position and applies what it reads, in batches,
// until an error or ctx ends.
func (r *Records) follow(ctx context.Context) error {
	pos, err := r.store.RecordsPosition(ctx)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := r.Ensure(sctx); err != nil {
		return err
	}
	js := r.cfg.JetStream()
	if js == nil {
		return errors.New("cluster records: not connected to nats")
	}
	stream, err := r.stream(sctx, js)
	if err != nil {
		r.forget()
		return fmt.Errorf("cluster records: stream: %w", err)
	}
	if pos, err = r.position(ctx, stream.CachedInfo(), pos); err != nil {
		return err
	}
	occ := natsjs.OrderedConsumerConfig{DeliverPolicy: natsjs.DeliverAllPolicy}
	if pos > 0 {
		occ.DeliverPolicy, occ.OptStartSeq = natsjs.DeliverByStartSequencePolicy, pos+1
	}
	cons, err := stream.OrderedConsumer(sctx, occ)
	if err != nil {
		return fmt.Errorf("cluster records: consumer: %w", err)
	}
	it, err := cons.Messages(natsjs.PullMaxMessages(r.cfg.Batch))
	if err != nil {
		return fmt.Errorf("cluster records: consumer: %w", err)
	}
	return r.read(ctx, it, stream.CachedInfo().Created, pos)
}

// read applies what it reads from the consumer's it, after pos, in
// batches, until an error, the stream made anew (created is its creation
// time), or ctx ends.
func (r *Records) read(ctx context.Context, it natsjs.MessagesContext, created time.Time, pos uint64) error {
	msgs := make(chan natsjs.Msg, r.cfg.Batch)
	errc := make(chan error, 1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			m, err := it.Next()
			if err != nil {
				errc <- err
				return
			}
			select {
			case msgs <- m:
			case <-stop:
				return
			}
		}
	}()
	defer func() {
		it.Stop()
		close(stop)
		wg.Wait()
	}()
	// The ordered consumer follows a stream made anew by itself, from
	// its old cursor, and waits on a deleted one without a word: the
	// stream is looked at now and then, and another creation time starts
	// follow over (position reads it from its start), as does a stream
	// gone (follow makes it again).
	check := time.NewTicker(10 * r.cfg.Poll)
	defer check.Stop()
	batch := make([]natsjs.Msg, 0, r.cfg.Batch)
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return fmt.Errorf("cluster records: read: %w", err)
		case <-check.C:
			if err := r.changed(ctx, created); err != nil {
				return err
			}
			continue
		case m := <-msgs:
			batch = append(batch, m)
		}
	more:
		for len(batch) < r.cfg.Batch {
			select {
			case m := <-msgs:
				batch = append(batch, m)
			default:
				break more
			}
		}
		var err error
		if pos, err = r.apply(ctx, batch, pos); err != nil {
			return err
		}
	}
}

// changed fails when the records stream is gone (it is made again at
// the next follow) or its creation time is no longer created; nil when
// it cannot be read otherwise (the next read tells).
func (r *Records) changed(ctx context.Context, created time.Time) error {
	js := r.cfg.JetStream()
	if js == nil {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	stream, err := r.stream(sctx, js)
	switch {
	case errors.Is(err, natsjs.ErrStreamNotFound):
		r.forget()
		return errors.New("cluster records: the records stream is gone; making it again")
	case err == nil && !stream.CachedInfo().Created.Equal(created):
		return errors.New("cluster records: the records stream was made anew; reading it again")
	}
	return nil
}

// apply applies a batch of messages read after pos, and returns the new
// position.
func (r *Records) apply(ctx context.Context, batch []natsjs.Msg, pos uint64) (uint64, error) {
	recs := make([]store.Record, 0, len(batch))
	for _, m := range batch {
		md, err := m.Metadata()
		if err != nil {
			return pos, fmt.Errorf("cluster records: metadata: %w", err)
		}
		seq := md.Sequence.Stream
		if seq <= pos {
			continue
		}
		if pos > 0 && seq > pos+1 {
			r.missed.Add(float64(seq - pos - 1))
			if !r.warnedGap.Swap(true) {
				r.log.Warn("cluster records: the records stream no longer holds records this gateway had not applied (away longer than cluster.records_ttl); going on from the first one held",
					"applied", pos, "next_held", seq, "missed", seq-pos-1)
			}
		}
		pos = seq
		rec, err := r.decode(m)
		if err != nil {
			r.log.Warn("cluster records: an unreadable record; skipped", "stream_seq", seq, "err", err)
			continue
		}
		if rec.Event != nil || rec.Round != nil || rec.State != nil {
			recs = append(recs, rec)
		}
	}
	if err := r.store.ApplyRecords(context.WithoutCancel(ctx), recs, pos); err != nil {
		return pos, err
	}
	r.applied.Add(float64(len(recs)))
	return pos, nil
}

// decode reads a record; one this gateway published is left empty.
func (r *Records) decode(m natsjs.Msg) (store.Record, error) {
	subject := m.Subject()
	if kind, ok := strings.CutPrefix(subject, r.cfg.Subject+"."); ok {
		subject = storeRecords + "." + kind
	}
	return decodeRecord(subject, m.Headers().Get(HeaderRecord), m.Data(), r.cfg.Gateway)
}

// subject is the store's record subject s (hookgate.records.<kind>) in
// this deployment's stream.
func (r *Records) subject(s string) string {
	if kind, ok := strings.CutPrefix(s, storeRecords+"."); ok {
		return r.cfg.Subject + "." + kind
	}
	return s
}

// decodeRecord reads a record of the stream (subject, the HeaderRecord
// header, data); one that gateway self published is left empty, as is a
// kind this version does not know.
func decodeRecord(subject, meta string, data []byte, self string) (store.Record, error) {
	switch {
	case subject == store.EventRecordSubject:
		var e store.EventRecord
		if err := json.Unmarshal([]byte(meta), &e); err != nil {
			return store.Record{}, err
		}
		if e.Origin == self {
			return store.Record{}, nil
		}
		if e.Source == "" || e.ID == "" {
			return store.Record{}, errors.New("an event record without a source or an id")
		}
		e.Body = append([]byte{}, data...)
		return store.Record{Event: &e}, nil
	case subject == store.RoundRecordSubject:
		var rd store.RoundRecord
		if err := json.Unmarshal(data, &rd); err != nil {
			return store.Record{}, err
		}
		if rd.Origin == self {
			return store.Record{}, nil
		}
		if rd.Route == "" || rd.Source == "" || rd.EventID == "" {
			return store.Record{}, errors.New("a round record without a route, source or event id")
		}
		return store.Record{Round: &rd}, nil
	case subject == store.StateRecordSubject:
		var sr store.StateRecord
		if err := json.Unmarshal(data, &sr); err != nil {
			return store.Record{}, err
		}
		if sr.Origin == self {
			return store.Record{}, nil
		}
		if sr.Route == "" || sr.Source == "" || sr.EventID == "" || sr.State == "" {
			return store.Record{}, errors.New("a state record without a route, source, event id or state")
		}
		return store.Record{State: &sr}, nil
	case strings.HasPrefix(subject, storeRecords+"."):
		return store.Record{}, nil // a kind of a later version: not this one's
	}
	return store.Record{}, fmt.Errorf("subject %q", subject)
}
