package store

import (
	"context"
	"slices"
	"testing"
)

// MetaKeys lists the keys that begin with the prefix, in order: "_" in the
// prefix is itself, not a pattern.
func TestMetaKeys(t *testing.T) {
	s := openTest(t, "")
	ctx := context.Background()
	for _, k := range []string{"route_since:b", "route_since:a", "routeXsince:c", "route_takes:a"} {
		if err := s.SetMeta(ctx, k, "1"); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.MetaKeys(ctx, "route_since:")
	if want := []string{"route_since:a", "route_since:b"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("MetaKeys(route_since:) = %v, %v; want %v", got, err, want)
	}
}
