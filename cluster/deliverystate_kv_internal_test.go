package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/internal/gatewaytest"
	"github.com/hookgate/hookgate/outbound"
	"github.com/hookgate/hookgate/store"
)

// lostAnswerKV commits the next Update, then answers as if the answer was
// lost (a timeout), as when a connection drops after the server wrote.
type lostAnswerKV struct {
	natsjs.KeyValue
	armed bool
	// stale reads answer the entry as it was before the write, as a
	// replica behind the leader may.
	stale  int
	before natsjs.KeyValueEntry
}

func (k *lostAnswerKV) Get(ctx context.Context, key string) (natsjs.KeyValueEntry, error) {
	if k.stale > 0 && k.before != nil {
		k.stale--
		return k.before, nil
	}
	return k.KeyValue.Get(ctx, key)
}

func (k *lostAnswerKV) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	if k.armed {
		k.armed = false
		if e, err := k.KeyValue.Get(ctx, key); err == nil {
			k.before = e
		}
		if _, err := k.KeyValue.Update(ctx, key, value, rev); err != nil {
			return 0, err
		}
		return 0, context.DeadlineExceeded
	}
	return k.KeyValue.Update(ctx, key, value, rev)
}

// A round's outcome whose write was committed but whose answer was lost
// is the round's own when the next try meets it, also when the first
// reads come from a replica behind: the round is recorded with its
// version and its record goes to the other gateways, not taken as fenced
// by another gateway's write.
//
// Stale reads past the round's wait leave it unknown whose the entry is:
// Record fails without taking the lease as lost, and Release, which reads
// again, records it.
func TestOutcomeWithLostAnswerIsOwn(t *testing.T) {
	for _, c := range []struct {
		stale int
		wait  time.Duration
	}{{0, 0}, {2, 0}, {3, 400 * time.Millisecond}} {
		t.Run(fmt.Sprintf("%d stale reads, wait %v", c.stale, c.wait), func(t *testing.T) {
			testOutcomeWithLostAnswer(t, c.stale, c.wait)
		})
	}
}

func testOutcomeWithLostAnswer(t *testing.T, stale int, wait time.Duration) {
	ctx := context.Background()
	js, st, log := kvFixture(t)
	s := NewDeliveryState(func() natsjs.JetStream { return js }, st,
		DeliveryStateConfig{Owner: "gw-a", Replica: st, Origin: "gw-a", Wait: wait}, log)
	if err := s.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	kv := &lostAnswerKV{KeyValue: s.kv, stale: stale}
	s.kv = kv
	seq, _, err := st.AdoptEvent(ctx, &store.Event{Source: "s", ID: "e1", Type: "t", Body: []byte("{}")}, 0)
	if err != nil {
		t.Fatal(err)
	}
	k := outbound.DeliveryKey{Route: "r", Seq: seq, Source: "s", EventID: "e1", Fresh: true}
	if !s.TryClaim(ctx, k) {
		t.Fatal("no claim")
	}
	kv.armed = true
	d := &store.Delivery{EventSeq: seq, Route: "r", Source: "s", EventID: "e1", EventType: "t",
		IdempotencyKey: outbound.IdempotencyKey("r", "s", "e1"), State: store.StateSucceeded, LastStatus: 200}
	err = s.Record(ctx, d, []store.Attempt{{StartedAt: time.Now(), Status: 200}})
	switch {
	case errors.Is(err, ErrFenced):
		t.Fatalf("Record = %v: the write that met a mismatch was the round's own", err)
	case err != nil && wait == 0:
		t.Fatalf("Record = %v, want nil", err)
	}
	s.Release(k)
	if n, err := st.CountRecordsOut(ctx); err != nil || n != 1 {
		t.Fatalf("records waiting for the other gateways = %d, %v; want the round's 1", n, err)
	}
	got, err := st.DeliveryStatus(ctx, "r", seq, "s", "e1")
	if err != nil || got.State != store.StateSucceeded || got.Attempts != 1 {
		t.Fatalf("the store's delivery = %+v, %v; want succeeded after 1 attempt", got, err)
	}
}

// HOOKGATE_DELIVERIES made anew (its NATS storage lost, or deleted)
// numbers its revisions past every one of the bucket before, so the
// versions the stores took from the old one stay below the new rounds'.
func TestDeliveriesBucketMadeAnewRevisionsGoOn(t *testing.T) {
	ctx := context.Background()
	js, st, log := kvFixture(t)
	now := time.Now()
	write := func(at time.Time) uint64 {
		t.Helper()
		s := NewDeliveryState(func() natsjs.JetStream { return js }, st, DeliveryStateConfig{Owner: "gw-a"}, log)
		s.now = func() time.Time { return at }
		if err := s.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		rev, err := s.kv.Put(ctx, DeliveryKey("r", "s", "e1"), []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	before := write(now)
	if err := js.DeleteKeyValue(ctx, DefaultBucket); err != nil {
		t.Fatal(err)
	}
	after := write(now.Add(time.Millisecond))
	if after <= before {
		t.Fatalf("revision in the bucket made anew %d, want past %d (the bucket before)", after, before)
	}
}

// createBucket with a first revision makes the stream nats.go's
// CreateKeyValue makes, but for its first sequence.
func TestCreateBucketAsCreateKeyValue(t *testing.T) {
	ctx := context.Background()
	js, _, _ := kvFixture(t)
	config := func(kv natsjs.KeyValue) natsjs.StreamConfig {
		t.Helper()
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c := st.(*natsjs.KeyValueBucketStatus).StreamInfo().Config
		c.Name, c.Subjects, c.FirstSeq = "", nil, 0
		return c
	}
	for _, cfg := range []natsjs.KeyValueConfig{
		{Description: "d", History: 1, TTL: time.Hour, Storage: natsjs.FileStorage},
		{History: 3, TTL: time.Minute, Storage: natsjs.MemoryStorage, MaxBytes: 1 << 20, MaxValueSize: 1024},
	} {
		cfg.Bucket = "LIBRARY"
		want, err := js.CreateKeyValue(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Bucket = "OURS"
		got, err := createBucket(ctx, js, cfg, firstRevision(time.Now()))
		if err != nil {
			t.Fatal(err)
		}
		if g, w := config(got), config(want); !reflect.DeepEqual(g, w) {
			t.Errorf("stream of %+v:\n got %+v\nwant %+v", cfg, g, w)
		}
		for _, b := range []string{"LIBRARY", "OURS"} {
			if err := js.DeleteKeyValue(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A delivery with rounds in this store and no entry in the bucket (made
// anew, or the entry past its ttl) goes on numbering its attempts from the
// store's, its first delivery or not: a round's attempts are kept, not
// dropped as ones it has.
func TestClaimWithoutEntryGoesOnFromStore(t *testing.T) {
	for _, fresh := range []bool{false, true} { // fresh: the events stream lost too, the event published again
		t.Run(fmt.Sprintf("fresh %v", fresh), func(t *testing.T) { testClaimWithoutEntry(t, fresh) })
	}
}

func testClaimWithoutEntry(t *testing.T, fresh bool) {
	ctx := context.Background()
	js, st, log := kvFixture(t)
	s := NewDeliveryState(func() natsjs.JetStream { return js }, st, DeliveryStateConfig{Owner: "gw-a", Replica: st, Origin: "gw-a"}, log)
	if err := s.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	seq, _, err := st.AdoptEvent(ctx, &store.Event{Source: "s", ID: "e1", Type: "t", Body: []byte("{}")}, 0)
	if err != nil {
		t.Fatal(err)
	}
	d := &store.Delivery{EventSeq: seq, Route: "r", Source: "s", EventID: "e1", EventType: "t",
		IdempotencyKey: outbound.IdempotencyKey("r", "s", "e1"), State: store.StateRetrying, Rounds: 1, LastStatus: 500}
	three := []store.Attempt{{StartedAt: time.Now(), Status: 500}, {StartedAt: time.Now(), Status: 500}, {StartedAt: time.Now(), Status: 500}}
	if err := st.RecordClusterRound(ctx, d, three, store.ClusterRound{Origin: "gw-a", FirstAttempt: 1, Attempts: 3, Version: 9}); err != nil {
		t.Fatal(err)
	}
	k := outbound.DeliveryKey{Route: "r", Seq: seq, Source: "s", EventID: "e1", Fresh: fresh} // no entry in the bucket
	if !s.TryClaim(ctx, k) {
		t.Fatal("no claim")
	}
	if got, err := s.Status(ctx, "r", seq, "s", "e1"); err != nil || got.Attempts != 3 { // as a round does first
		t.Fatalf("status %+v, %v; want the store's 3 attempts", got, err)
	}
	d = &store.Delivery{EventSeq: seq, Route: "r", Source: "s", EventID: "e1", EventType: "t",
		IdempotencyKey: outbound.IdempotencyKey("r", "s", "e1"), State: store.StateSucceeded, Rounds: 2, LastStatus: 200}
	if err := s.Record(ctx, d, []store.Attempt{{StartedAt: time.Now(), Status: 200}}); err != nil {
		t.Fatal(err)
	}
	s.Release(k)
	got, err := st.Attempts(ctx, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[3].Attempt != 4 || got[3].Status != 200 {
		t.Fatalf("attempts %+v, want 4, the last (200) numbered 4", got)
	}
}

// kvFixture is a NATS server of the test's own with JetStream, and a
// store.
func kvFixture(t *testing.T) (natsjs.JetStream, *store.Store, *slog.Logger) {
	t.Helper()
	js := connect(t, gatewaytest.RunNATS(t, -1, t.TempDir()).ClientURL())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(context.Background(), store.Config{Path: filepath.Join(t.TempDir(), "db")}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return js, st, log
}

// The state an Unreset puts back, whose write was committed but whose
// answer was lost, is the release's own when its next try meets it: the
// entry holds it, and its record goes to the other gateways, which
// applied the reset's pending.
func TestUnresetWithLostAnswerIsRecorded(t *testing.T) {
	ctx := context.Background()
	js, st, log := kvFixture(t)
	s := NewDeliveryState(func() natsjs.JetStream { return js }, st,
		DeliveryStateConfig{Owner: "gw-a", Replica: st, Origin: "gw-a"}, log)
	if err := s.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	kv := &lostAnswerKV{KeyValue: s.kv}
	s.kv = kv
	seq, _, err := st.AdoptEvent(ctx, &store.Event{Source: "s", ID: "e1", Type: "t", Body: []byte("{}")}, 0)
	if err != nil {
		t.Fatal(err)
	}
	k := outbound.DeliveryKey{Route: "r", Seq: seq, Source: "s", EventID: "e1", Fresh: true}
	if !s.TryClaim(ctx, k) {
		t.Fatal("no claim")
	}
	d := &store.Delivery{EventSeq: seq, Route: "r", Source: "s", EventID: "e1", EventType: "t",
		IdempotencyKey: outbound.IdempotencyKey("r", "s", "e1"), State: store.StateDead, LastStatus: 500}
	if err := s.Record(ctx, d, []store.Attempt{{StartedAt: time.Now(), Status: 500}}); err != nil {
		t.Fatal(err)
	}
	s.Release(k)
	k.Fresh = false
	if _, _, err := s.Reset(ctx, k, false); err != nil { // an operator's retry: pending
		t.Fatal(err)
	}
	if !s.TryClaim(ctx, k) {
		t.Fatal("no claim of the operator's round")
	}
	s.Unreset(k, store.StateDead) // the round ran nothing
	before, err := st.CountRecordsOut(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kv.armed = true
	s.Release(k)
	if e, _, _, err := s.get(ctx, DeliveryKey("r", "s", "e1")); err != nil || e.State != store.StateDead || e.Owner != "" {
		t.Fatalf("the entry after the release: %+v, %v; want dead, no lease", e, err)
	}
	if n, err := st.CountRecordsOut(ctx); err != nil || n != before+1 {
		t.Fatalf("records waiting for the other gateways = %d, %v; want %d (the state put back)", n, err, before+1)
	}
}

// landingLaterJS refuses the first stream creation as another gateway's
// in flight would (the name in use), and makes that other gateway's
// stream (cfg with another first sequence) a moment later: its creation
// lands after this gateway looked for it.
type landingLaterJS struct {
	natsjs.JetStream
	landed chan error
}

func (j *landingLaterJS) CreateStream(ctx context.Context, cfg natsjs.StreamConfig) (natsjs.Stream, error) {
	if j.landed == nil {
		j.landed = make(chan error, 1)
		other := cfg
		other.FirstSeq++
		time.AfterFunc(300*time.Millisecond, func() {
			_, err := j.JetStream.CreateStream(context.Background(), other)
			j.landed <- err
		})
		return nil, natsjs.ErrStreamNameAlreadyInUse
	}
	return j.JetStream.CreateStream(ctx, cfg)
}

// The deliveries bucket another gateway is making (each numbers its
// revisions from its own start, so this gateway's creation is refused as
// another config) may not be found for a moment after: it is looked up
// again until it is.
func TestDeliveriesBucketMadeElsewhereFoundOnceItLands(t *testing.T) {
	js := &landingLaterJS{JetStream: connect(t, gatewaytest.RunNATS(t, 0, t.TempDir()).ClientURL())}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := ensureBucket(ctx, js, natsjs.KeyValueConfig{Bucket: "DELIVERIES_ELSEWHERE", History: 1},
		firstRevision(time.Now()), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("ensureBucket: %v", err)
	}
	if err := <-js.landed; err != nil {
		t.Fatalf("the other gateway's creation: %v", err)
	}
	if kv.Bucket() != "DELIVERIES_ELSEWHERE" {
		t.Fatalf("bucket %q", kv.Bucket())
	}
}
