package store

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"
)

// Since and Until bound a list and a count by the deliveries' creation
// time: at or after Since, before Until.
func TestDeliveryFilterSinceUntil(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		ev := testEvent(fmt.Sprintf("evt_%d", i))
		if _, err := s.Claim(ctx, ev); err != nil {
			t.Fatal(err)
		}
		d := &Delivery{EventSeq: ev.Seq, Route: "billing", Source: "stripe", EventID: ev.ID, IdempotencyKey: "k",
			State: StateDead, Rounds: 1, LastStatus: 410}
		if err := s.RecordRound(ctx, d, []Attempt{{StartedAt: time.Now(), Status: 410}}); err != nil {
			t.Fatal(err)
		}
		if err := s.write(ctx, func(tx *sql.Tx) error {
			_, err := tx.Exec(`UPDATE deliveries SET created_at = ? WHERE id = ?`, int64(i)*1000, d.ID)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	ms := func(n int64) time.Time { return time.UnixMilli(n) }
	for _, c := range []struct {
		f    DeliveryFilter
		want int
	}{
		{DeliveryFilter{State: StateDead}, 3},
		{DeliveryFilter{State: StateDead, Since: ms(2000)}, 2},
		{DeliveryFilter{State: StateDead, Until: ms(2000)}, 1},
		{DeliveryFilter{Route: "billing", Since: ms(1000), Until: ms(3000)}, 2},
		{DeliveryFilter{Route: "other", Since: ms(1000)}, 0},
		{DeliveryFilter{State: StateSucceeded}, 0},
	} {
		n, err := s.CountDeliveries(ctx, c.f)
		if err != nil || n != int64(c.want) {
			t.Errorf("CountDeliveries(%+v) = %d, %v; want %d", c.f, n, err, c.want)
		}
		ds, err := s.ListDeliveries(ctx, c.f)
		if err != nil || len(ds) != c.want {
			t.Errorf("ListDeliveries(%+v) = %d, %v; want %d", c.f, len(ds), err, c.want)
		}
	}
	// After is ignored by the count, applied by the list.
	cur := DeliveryCursor{CreatedAt: 1000, Route: "billing", Source: "stripe", EventID: "evt_1"}
	f := DeliveryFilter{State: StateDead, After: &cur}
	if n, _ := s.CountDeliveries(ctx, f); n != 3 {
		t.Errorf("CountDeliveries with After = %d, want 3", n)
	}
	if ds, _ := s.ListDeliveries(ctx, f); len(ds) != 2 {
		t.Errorf("ListDeliveries after the first = %d, want 2", len(ds))
	}
}
