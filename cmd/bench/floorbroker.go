package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// The brokered floor: the delivering floor with the broker the gateway is
// built on between the commit and the workers, the least a gateway does
// that hands its work to JetStream. After a fresh claim's commit the event
// is published (asynchronously, with Nats-Msg-Id) to an embedded
// JetStream server's file stream configured as the gateway's (interest
// retention, 20 s duplicate window, fsync every second); one durable pull
// consumer's messages go to the workers, and each message is acked after
// its outcome's commit. A restart would publish again the events with no
// outcome, so nothing else is recorded. No retries, no signatures, no
// relay, no attempt records.

// floorBroker is the brokered floor's server, connection and consumer.
type floorBroker struct {
	srv  *server.Server
	nc   *nats.Conn
	js   natsjs.JetStream
	msgs natsjs.MessagesContext
}

const (
	floorStream  = "FLOOR"
	floorSubject = "floor.events"
)

// startFloorBroker starts the embedded server with its store in dir, the
// stream and the consumer (n messages pending at most, as the gateway's
// route with n workers).
func startFloorBroker(ctx context.Context, dir string, n int) (*floorBroker, error) {
	srv, err := server.NewServer(&server.Options{
		ServerName:   "floor",
		JetStream:    true,
		StoreDir:     filepath.Join(dir, "jetstream"),
		SyncInterval: time.Second,
		DontListen:   true,
		NoSigs:       true,
	})
	if err != nil {
		return nil, fmt.Errorf("floor: nats server: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("floor: nats server not ready")
	}
	fb := &floorBroker{srv: srv}
	if fb.nc, err = nats.Connect("", nats.InProcessServer(srv)); err != nil {
		srv.Shutdown()
		return nil, fmt.Errorf("floor: connect: %w", err)
	}
	if err := fb.prepare(ctx, n); err != nil {
		fb.close()
		return nil, err
	}
	return fb, nil
}

func (fb *floorBroker) prepare(ctx context.Context, n int) error {
	var err error
	if fb.js, err = natsjs.New(fb.nc); err != nil {
		return fmt.Errorf("floor: jetstream: %w", err)
	}
	if _, err := fb.js.CreateOrUpdateStream(ctx, natsjs.StreamConfig{
		Name:       floorStream,
		Subjects:   []string{floorSubject},
		Storage:    natsjs.FileStorage,
		Retention:  natsjs.InterestPolicy,
		Duplicates: 20 * time.Second,
	}); err != nil {
		return fmt.Errorf("floor: stream: %w", err)
	}
	cons, err := fb.js.CreateOrUpdateConsumer(ctx, floorStream, natsjs.ConsumerConfig{
		Durable:       "deliver",
		AckPolicy:     natsjs.AckExplicitPolicy,
		AckWait:       time.Minute,
		MaxAckPending: n,
	})
	if err != nil {
		return fmt.Errorf("floor: consumer: %w", err)
	}
	if fb.msgs, err = cons.Messages(natsjs.PullMaxMessages(n)); err != nil {
		return fmt.Errorf("floor: consume: %w", err)
	}
	return nil
}

// publish publishes the queued events until ctx ends; those left are
// not (a restart would publish them again).
func (fb *floorBroker) publish(ctx context.Context, queue <-chan floorJob, wg *sync.WaitGroup) {
	defer wg.Done()
	for {
		var j floorJob
		select {
		case j = <-queue:
		case <-ctx.Done():
			return
		}
		m := &nats.Msg{Subject: floorSubject, Data: j.body, Header: nats.Header{}}
		m.Header.Set(nats.MsgIdHdr, j.id)
		if _, err := fb.js.PublishMsgAsync(m); err != nil {
			logf("floor: publish %s: %v", j.id, err)
		}
	}
}

// consume gives the consumer's messages to the workers until it is
// stopped.
func (fb *floorBroker) consume(ctx context.Context, in chan<- floorJob, wg *sync.WaitGroup) {
	defer wg.Done()
	for {
		m, err := fb.msgs.Next()
		if err != nil {
			if !errors.Is(err, natsjs.ErrMsgIteratorClosed) {
				logf("floor: consume: %v", err)
			}
			return
		}
		select {
		case in <- floorJob{id: m.Headers().Get(nats.MsgIdHdr), body: m.Data(), msg: m}:
		case <-ctx.Done():
			return
		}
	}
}

// close stops the consumer, waits for the publications under way, and
// stops the connection and the server.
func (fb *floorBroker) close() {
	if fb.msgs != nil {
		fb.msgs.Stop()
	}
	if fb.js != nil {
		select {
		case <-fb.js.PublishAsyncComplete():
		case <-time.After(10 * time.Second):
			logf("floor: publications still pending at stop")
		}
	}
	fb.nc.Close()
	fb.srv.Shutdown()
	fb.srv.WaitForShutdown()
}
