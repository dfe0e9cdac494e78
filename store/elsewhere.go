package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// ClaimedElsewhere takes an event out of the outbox for good: in cluster
// mode, another gateway (holder) holds its claim, and publishes and
// delivers it. The event stays stored (a later copy is a duplicate here)
// until retention prunes it. An event no longer in the outbox is left as
// it is.
func (s *Store) ClaimedElsewhere(ctx context.Context, seq int64, holder string, at time.Time) error {
	err := s.writeOutboxSafe(ctx, func(tx *sql.Tx) error {
		was, err := changed(tx.Exec(`DELETE FROM outbox WHERE seq = ?`, seq))
		if err != nil || !was {
			return err
		}
		_, err = tx.Exec(`INSERT INTO claimed_elsewhere (seq, holder, recorded_at) VALUES (?, ?, ?)
			ON CONFLICT (seq) DO UPDATE SET holder = excluded.holder, recorded_at = excluded.recorded_at`,
			seq, holder, at.UnixMilli())
		return err
	})
	if err != nil {
		return fmt.Errorf("record %d as claimed by %s: %w", seq, holder, err)
	}
	return nil
}

// HolderElsewhere returns the gateway holding the claim of the event
// stored here as seq, "" when it is not recorded as claimed elsewhere.
func (s *Store) HolderElsewhere(ctx context.Context, seq int64) (string, error) {
	var holder string
	err := s.r.QueryRowContext(ctx, `SELECT holder FROM claimed_elsewhere WHERE seq = ?`, seq).Scan(&holder)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("%w: claimed elsewhere: %w", ErrUnavailable, err)
	}
	return holder, nil
}

// CountClaimedElsewhere is the number of events recorded as claimed by
// another gateway.
func (s *Store) CountClaimedElsewhere(ctx context.Context) (int64, error) {
	var n int64
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM claimed_elsewhere`).Scan(&n); err != nil {
		return 0, fmt.Errorf("%w: claimed elsewhere: %w", ErrUnavailable, err)
	}
	return n, nil
}
