package store

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// openCommits opens a store that records the size of each group commit.
func openCommits(t *testing.T) (*Store, func() []int) {
	t.Helper()
	var mu sync.Mutex
	var sizes []int
	s, err := Open(context.Background(), Config{Path: filepath.Join(t.TempDir(), "hookgate.db"), OnCommit: func(n int) {
		mu.Lock()
		sizes = append(sizes, n)
		mu.Unlock()
	}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, func() []int {
		mu.Lock()
		defer mu.Unlock()
		return append([]int(nil), sizes...)
	}
}

// paceRound records the first round of delivery i, as RecordRound or as
// RecordClusterRound.
func paceRound(s *Store, cluster bool, i int) error {
	d := &Delivery{EventSeq: int64(i), Route: "billing", Source: "stripe", EventID: fmt.Sprintf("evt_%d", i),
		EventType: "invoice.paid", IdempotencyKey: fmt.Sprintf("hg_%d", i), State: StateSucceeded, LastStatus: 204}
	at := []Attempt{{StartedAt: time.Now(), Duration: time.Millisecond, Status: 204, Response: []byte{}}}
	if cluster {
		return s.RecordClusterRound(context.Background(), d, at, ClusterRound{Origin: "gw1", FirstAttempt: 1, Attempts: 1, Version: uint64(i)})
	}
	return s.RecordRound(context.Background(), d, at)
}

// A claim queued behind many delivery rounds (a backlog catching up) is
// committed with at most pacedRounds rounds beyond its own one; the rest
// follow in later commits, none lost.
func TestClaimCommitsBeforeQueuedRounds(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		t.Run(fmt.Sprintf("cluster=%v", cluster), func(t *testing.T) {
			s, sizes := openCommits(t)
			// Hold the writer in one op, then queue the rounds, then the claim.
			release := make(chan struct{})
			holding := make(chan struct{})
			go s.writeOp(context.Background(), func(*sql.Tx) error { close(holding); <-release; return nil }, true)
			<-holding
			const rounds = 40
			var wg sync.WaitGroup
			var failed atomic.Int64
			for i := 1; i <= rounds; i++ {
				wg.Go(func() {
					if err := paceRound(s, cluster, i); err != nil {
						failed.Add(1)
					}
				})
			}
			gatewaytest.WaitFor(t, "the rounds queued", 10*time.Second, func() (bool, string) {
				return len(s.ops) == rounds, fmt.Sprintf("%d queued", len(s.ops))
			})
			claimed := make(chan error, 1)
			go func() {
				_, err := s.Claim(context.Background(), testEvent("evt_claim"))
				claimed <- err
			}()
			gatewaytest.WaitFor(t, "the claim queued", 10*time.Second, func() (bool, string) {
				return len(s.ops) == rounds+1, fmt.Sprintf("%d queued", len(s.ops))
			})
			close(release)
			if err := <-claimed; err != nil {
				t.Fatalf("claim: %v", err)
			}
			wg.Wait()
			if n := failed.Load(); n > 0 {
				t.Fatalf("%d rounds failed", n)
			}
			got := sizes()
			// got[0] is the holding op's commit; got[1] took the claim.
			if len(got) < 2 || got[1] > 1+1+pacedRounds {
				t.Fatalf("commits %v: the claim's commit took %v ops, want at most the claim and %d rounds", got, got[1:2], 1+pacedRounds)
			}
			total := 0
			for _, n := range got[1:] {
				total += n
			}
			if total != rounds+1 {
				t.Fatalf("commits %v: %d ops after the holding one, want %d", got, total, rounds+1)
			}
			var stored int
			if err := s.r.QueryRow(`SELECT count(*) FROM deliveries`).Scan(&stored); err != nil || stored != rounds {
				t.Fatalf("deliveries stored: %d, %v; want %d", stored, err, rounds)
			}
		})
	}
}

// Rounds are never starved: while claims never stop coming, every queued
// round is still recorded.
func TestRoundsRecordedUnderConstantClaims(t *testing.T) {
	s := openTest(t, "")
	stop := make(chan struct{})
	var claimers sync.WaitGroup
	for c := range 8 {
		claimers.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Claim(context.Background(), testEvent(fmt.Sprintf("evt_%d_%d", c, i))); err != nil {
					t.Errorf("claim: %v", err)
					return
				}
			}
		})
	}
	defer claimers.Wait()
	defer close(stop)
	const rounds = 200
	var recorded atomic.Int64
	for i := 1; i <= rounds; i++ {
		go func() {
			if err := paceRound(s, false, i); err != nil {
				t.Errorf("round %d: %v", i, err)
			}
			recorded.Add(1)
		}()
	}
	gatewaytest.WaitFor(t, "every round recorded while claims keep coming", 60*time.Second, func() (bool, string) {
		n := recorded.Load()
		return n == rounds, fmt.Sprintf("%d of %d", n, rounds)
	})
}
