package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Rounds add up: attempts are numbered on across rounds, a succeeded
// delivery stays succeeded, and d.ID and d.Attempts come back as stored.
func TestRecordRound(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	start := time.Now().Truncate(time.Millisecond)
	att := func(status int) Attempt {
		return Attempt{StartedAt: start, Duration: 3 * time.Millisecond, Status: status, Response: []byte("r")}
	}
	if _, err := s.Delivery(ctx, "billing", "stripe", "evt_1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Delivery before any round: %v, want ErrNotFound", err)
	}

	next := start.Add(time.Minute)
	d := &Delivery{Route: "billing", Source: "stripe", EventID: "evt_1", EventType: "invoice.paid", IdempotencyKey: "k",
		State: StateRetrying, Rounds: 1, LastStatus: 500, LastError: "Internal Server Error", NextAttemptAt: next}
	if err := s.RecordRound(ctx, d, []Attempt{att(500), att(500)}); err != nil {
		t.Fatal(err)
	}
	if d.ID == 0 || d.Attempts != 2 {
		t.Fatalf("after round 1: ID %d, Attempts %d; want an ID and 2", d.ID, d.Attempts)
	}
	st, err := s.Delivery(ctx, "billing", "stripe", "evt_1")
	if err != nil || st.ID != d.ID || st.State != StateRetrying || st.Attempts != 2 || st.Rounds != 1 ||
		!st.NextAttemptAt.Equal(next) || st.LastError != "Internal Server Error" {
		t.Fatalf("Delivery = %+v, %v", st, err)
	}

	id := d.ID
	d = &Delivery{Route: "billing", Source: "stripe", EventID: "evt_1", IdempotencyKey: "k",
		State: StateSucceeded, Rounds: 1, LastStatus: 204}
	if err := s.RecordRound(ctx, d, []Attempt{att(204)}); err != nil {
		t.Fatal(err)
	}
	if d.ID != id || d.Attempts != 3 {
		t.Fatalf("after round 2: ID %d, Attempts %d; want %d and 3", d.ID, d.Attempts, id)
	}
	// A late round of a second copy does not undo the success.
	d = &Delivery{Route: "billing", Source: "stripe", EventID: "evt_1", IdempotencyKey: "k",
		State: StateRetrying, Rounds: 2, LastStatus: 503, NextAttemptAt: next}
	if err := s.RecordRound(ctx, d, []Attempt{att(503)}); err != nil {
		t.Fatal(err)
	}
	full, err := s.Delivery(ctx, "billing", "stripe", "evt_1")
	if err != nil || full.State != StateSucceeded || full.Attempts != 4 || full.Rounds != 2 || full.LastStatus != 503 ||
		full.EventType != "invoice.paid" {
		t.Fatalf("Delivery = %+v, %v; want succeeded with 4 attempts", full, err)
	}
	as, err := s.Attempts(ctx, id)
	if err != nil || len(as) != 4 {
		t.Fatalf("Attempts = %+v, %v; want 4", as, err)
	}
	for i, a := range as {
		if a.Attempt != i+1 || !a.StartedAt.Equal(start) || a.Duration != 3*time.Millisecond || string(a.Response) != "r" {
			t.Errorf("attempt %d = %+v", i, a)
		}
	}
	if as[3].Status != 503 || as[2].Status != 204 {
		t.Errorf("attempt statuses %d %d, want 204 503", as[2].Status, as[3].Status)
	}

	// A round without attempts (cut short) changes only the schedule.
	d = &Delivery{Route: "other", Source: "stripe", EventID: "evt_1", IdempotencyKey: "k2", State: StatePending}
	if err := s.RecordRound(ctx, d, nil); err != nil || d.Attempts != 0 || d.ID == id {
		t.Fatalf("empty round: %+v, %v", d, err)
	}
}

// A store that refuses writes fails the round (and its whole batch) with
// ErrUnavailable; nothing is stored, and rounds work again after.
func TestRecordRoundUnwritable(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	if _, err := s.w.Exec("PRAGMA query_only = 1"); err != nil {
		t.Fatal(err)
	}
	d := &Delivery{Route: "billing", Source: "stripe", EventID: "evt_1", IdempotencyKey: "k", State: StateSucceeded}
	if err := s.RecordRound(ctx, d, []Attempt{{StartedAt: time.Now(), Status: 200}}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("RecordRound on a read-only db: %v, want ErrUnavailable", err)
	}
	if _, err := s.w.Exec("PRAGMA query_only = 0"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delivery(ctx, "billing", "stripe", "evt_1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("refused round was stored: %v", err)
	}
	if err := s.RecordRound(ctx, d, []Attempt{{StartedAt: time.Now(), Status: 200}}); err != nil || d.Attempts != 1 {
		t.Fatalf("RecordRound after recovery: %+v, %v", d, err)
	}
}
