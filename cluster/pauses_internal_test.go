package cluster

import "testing"

func TestWatchBehind(t *testing.T) {
	for _, c := range []struct {
		name               string
		seen, last, behind uint64
		wantBehind         uint64
		wantErr            bool
	}{
		{"caught up", 7, 7, 0, 0, false},
		{"a change on its way", 7, 8, 0, 8, false},
		{"read since the previous check", 8, 9, 8, 9, false},
		{"caught up since", 9, 9, 8, 0, false},
		{"not read since the previous check", 7, 8, 8, 0, true},
		{"not read, more written", 7, 9, 8, 0, true},
		{"a bucket made anew", 7, 2, 0, 0, true},
	} {
		got, err := watchBehind(c.seen, c.last, c.behind)
		if got != c.wantBehind || (err != nil) != c.wantErr {
			t.Errorf("%s: watchBehind(%d, %d, %d) = %d, %v; want %d, error %v", c.name, c.seen, c.last, c.behind, got, err, c.wantBehind, c.wantErr)
		}
	}
}
