package store

import (
	"context"
	"testing"
	"time"
)

// A delivery a route's filter rejected is finished: terminal for the
// engine, for retention and for the recovery scan.
func TestFilteredIsFinished(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	if !(&DeliveryStatus{State: StateFiltered}).Terminal() || !(&Delivery{State: StateFiltered}).Terminal() {
		t.Fatal("filtered is not terminal")
	}
	old := time.Now().Add(-48 * time.Hour)
	seed(t, s, []seedEvent{
		{id: "evt_filtered", typ: "a", received: old, published: true, deliveries: map[string]string{"live": StateFiltered}},
		{id: "evt_newest", typ: "a", received: time.Now(), published: true},
	})
	var recovered []string
	err := s.PublishedSince(ctx, -1, map[string]RouteTakes{"live": {Sources: []string{"stripe"}}}, func(ev *Event, deliveries map[string]bool) error {
		if ev.ID == "evt_filtered" || !deliveries["live"] {
			recovered = append(recovered, ev.ID)
		}
		return nil
	})
	if err != nil || len(recovered) != 1 || recovered[0] != "evt_newest" {
		t.Fatalf("PublishedSince: %v %v, want only evt_newest", recovered, err)
	}
	res, _, _, err := s.PruneEvents(ctx, time.Now().Add(-time.Hour), EventCursor{}, 10, nil)
	if err != nil || res.Events != 1 {
		t.Fatalf("PruneEvents = %+v, %v; want the filtered event pruned", res, err)
	}
}
