package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/stripe/stripe-go/v83/webhook"
	"github.com/tidwall/gjson"
)

// The durable floor (issue 25): the least any durable, deduplicating
// receiver does. Fiber reads the body, stripe-go checks the signature, the
// id is cut out of the JSON, and the event (id, body, receipt time) is
// claimed in SQLite (WAL, synchronous=FULL, one writer, group commit of up
// to floorBatch per transaction, INSERT … ON CONFLICT(id) DO NOTHING
// RETURNING), answered after the commit. Nothing else.

// floorBatch is the most claims one transaction commits.
const floorBatch = 512

// floorClaim is one event waiting for the writer; done gets whether it
// was new, or the error of its transaction.
type floorClaim struct {
	id   string
	body []byte
	at   int64
	done chan floorResult
}

type floorResult struct {
	fresh bool
	err   error
}

// floorStore is the floor's SQLite file and its one writer.
type floorStore struct {
	db     *sql.DB
	claims chan *floorClaim
	done   chan struct{}

	deliver *floorDeliverer // the delivering floor's (floordeliver.go); nil for the floor
}

// openFloor opens (or creates) the floor's store in dir and starts its
// writer.
func openFloor(dir string) (*floorStore, error) {
	dsn := "file:" + filepath.Join(dir, "floor.db") + "?_journal_mode=WAL&_synchronous=FULL&_busy_timeout=5000"
	db, err := sql.Open("sqlite3", dsn)
	if err != nil {
		return nil, fmt.Errorf("floor: open: %w", err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS events (id TEXT PRIMARY KEY, body BLOB NOT NULL, received_at INTEGER NOT NULL)`); err != nil {
		return nil, errors.Join(fmt.Errorf("floor: schema: %w", err), db.Close())
	}
	s := &floorStore{db: db, claims: make(chan *floorClaim, 4*floorBatch), done: make(chan struct{})}
	go s.write()
	return s, nil
}

// write is the one writer: it takes what is waiting (up to floorBatch),
// claims it in one transaction, and answers each after the commit.
func (s *floorStore) write() {
	defer close(s.done)
	batch := make([]*floorClaim, 0, floorBatch)
	fresh := make([]bool, 0, floorBatch)
	for c := range s.claims {
		batch = append(batch[:0], c)
	more:
		for len(batch) < floorBatch {
			select {
			case c, ok := <-s.claims:
				if !ok {
					break more
				}
				batch = append(batch, c)
			default:
				break more
			}
		}
		fresh = fresh[:len(batch)]
		err := s.commit(batch, fresh)
		for i, c := range batch {
			c.done <- floorResult{fresh: fresh[i], err: err}
		}
	}
}

func (s *floorStore) commit(batch []*floorClaim, fresh []bool) error {
	return s.inTx(func(tx *sql.Tx) error {
		st, err := tx.Prepare(`INSERT INTO events (id, body, received_at) VALUES (?, ?, ?) ON CONFLICT(id) DO NOTHING RETURNING 1`)
		if err != nil {
			return fmt.Errorf("floor: prepare: %w", err)
		}
		defer st.Close()
		for i, c := range batch {
			var one int
			switch err := st.QueryRow(c.id, c.body, c.at).Scan(&one); {
			case errors.Is(err, sql.ErrNoRows):
				fresh[i] = false
			case err != nil:
				return fmt.Errorf("floor: claim: %w", err)
			default:
				fresh[i] = true
			}
		}
		return nil
	})
}

// inTx runs fn in one transaction: committed if fn succeeds, else rolled
// back.
func (s *floorStore) inTx(fn func(*sql.Tx) error) (err error) {
	tx, err := s.db.Begin()
	if err != nil {
		return fmt.Errorf("floor: begin: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, tx.Rollback())
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("floor: commit: %w", err)
	}
	return nil
}

// claim waits until the event is committed; fresh is false for a repeat.
func (s *floorStore) claim(ctx context.Context, id string, body []byte) (fresh bool, err error) {
	c := &floorClaim{id: id, body: body, at: time.Now().UnixMilli(), done: make(chan floorResult, 1)}
	select {
	case s.claims <- c:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	r := <-c.done
	return r.fresh, r.err
}

func (s *floorStore) close() error {
	var err error
	if s.deliver != nil {
		err = s.deliver.stop()
	}
	close(s.claims)
	<-s.done
	return errors.Join(err, s.db.Close())
}

// floorHandler is the floor's intake: the answers the gateway gives
// (accepted or duplicate, 200) so that the loader counts them alike.
func floorHandler(s *floorStore, secret string) fiber.Handler {
	return func(c *fiber.Ctx) error {
		body := append([]byte(nil), c.Body()...) // Fiber reuses its buffers
		if err := webhook.ValidatePayloadWithTolerance(body, c.Get("Stripe-Signature"), secret, 5*time.Minute); err != nil {
			return c.Status(fiber.StatusUnauthorized).JSON(fiber.Map{"error": "invalid signature"})
		}
		id := gjson.GetBytes(body, "id")
		if id.Type != gjson.String || id.Str == "" || len(id.Str) > 255 {
			return c.Status(fiber.StatusBadRequest).JSON(fiber.Map{"error": "no event id"})
		}
		fresh, err := s.claim(c.UserContext(), id.Str, body)
		if err != nil {
			return c.Status(fiber.StatusServiceUnavailable).JSON(fiber.Map{"error": "not stored"})
		}
		if !fresh {
			return c.JSON(fiber.Map{"status": "duplicate"})
		}
		return c.JSON(fiber.Map{"status": "accepted"})
	}
}

// newFloorApp is the floor's Fiber app, configured like the bare handler's,
// with /healthz for the restart mode.
func newFloorApp(s *floorStore, secret string) *fiber.App {
	f := fiber.New(fiber.Config{
		DisableStartupMessage: true,
		BodyLimit:             1<<20 + 1,
		ReadTimeout:           30 * time.Second,
		WriteTimeout:          30 * time.Second,
		IdleTimeout:           120 * time.Second,
	})
	f.Get("/healthz", func(c *fiber.Ctx) error { return c.JSON(fiber.Map{"status": "ok"}) })
	f.Post("/webhooks/:source", floorHandler(s, secret))
	return f
}

// serveFloor serves the durable floor on addr with its store in dir
// (this binary with -floor ADDR -floor-dir DIR), or with deliverURL the
// delivering floor, n workers posting there (-floor-deliver URL
// -floor-concurrency N), through JetStream with brokered (-floor-broker).
func serveFloor(addr, dir, deliverURL string, n int, brokered bool) int {
	var s *floorStore
	var err error
	if deliverURL == "" {
		s, err = openFloor(dir)
	} else {
		s, err = openDeliveringFloor(dir, deliverURL, n, floorQueue, brokered)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		return 1
	}
	f := newFloorApp(s, benchSecret)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		if err := f.ShutdownWithTimeout(5 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, "floor:", err)
		}
	}()
	code := 0
	if err := f.Listen(addr); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		code = 1
	}
	if err := s.close(); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		code = 1
	}
	return code
}

// floorRatios are the report's rows of issue 25's ratios: intake to the
// durable floor (target 0.90 for intake alone, -no-route; 0.60 with
// delivery running), intake to bare Fiber, and end to end to the floor
// (target 0.50); then, without targets, intake and end to end to the
// delivering floor's (dIntake, dEndToEnd). A rate not measured (0) leaves
// its rows out.
func floorRatios(intake, endToEnd, floor, bare, dIntake, dEndToEnd float64, noRoute bool) []string {
	var rows []string
	if floor > 0 && intake > 0 {
		want, what := 0.60, "with delivery running"
		if noRoute {
			want, what = 0.90, "intake alone"
		}
		q := intake / floor
		rows = append(rows, fmt.Sprintf("| intake / durable floor (%s) | %.2f | ≥ %.2f | %s |\n", what, q, want, yes(q >= want)))
	}
	if bare > 0 && intake > 0 {
		rows = append(rows, fmt.Sprintf("| intake / bare Fiber | %.2f | | |\n", intake/bare))
	}
	if floor > 0 && endToEnd > 0 && !noRoute {
		q := endToEnd / floor
		rows = append(rows, fmt.Sprintf("| end-to-end delivery / durable floor | %.2f | ≥ 0.50 | %s |\n", q, yes(q >= 0.50)))
	}
	return append(rows, ratiosTo("delivering floor", intake, endToEnd, dIntake, dEndToEnd, noRoute)...)
}

// ratiosTo are the rows of intake and end to end to another floor's
// (name's: the delivering or the brokered floor), without targets; none
// with -no-route.
func ratiosTo(name string, intake, endToEnd, fIntake, fEndToEnd float64, noRoute bool) []string {
	var rows []string
	if fIntake > 0 && intake > 0 && !noRoute {
		rows = append(rows, fmt.Sprintf("| intake / %s (with delivery running) | %.2f | | |\n", name, intake/fIntake))
	}
	if fEndToEnd > 0 && endToEnd > 0 && !noRoute {
		rows = append(rows, fmt.Sprintf("| end to end / %s | %.2f | | |\n", name, endToEnd/fEndToEnd))
	}
	return rows
}
