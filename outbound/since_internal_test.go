package outbound

import "testing"

func TestOwes(t *testing.T) {
	const since = 1000
	for _, c := range []struct {
		name          string
		has, terminal bool
		received      int64
		want          bool
	}{
		{"no delivery, received after since", false, false, since + 1, true},
		{"no delivery, received at since", false, false, since, true},
		{"no delivery, received before since", false, false, since - 1, false},
		{"open delivery, received before since", true, false, since - 1, true},
		{"open delivery, received after since", true, false, since + 1, true},
		{"terminal delivery, received after since", true, true, since + 1, false},
		{"terminal delivery, received before since", true, true, since - 1, false},
	} {
		if got := owes(c.has, c.terminal, c.received, since); got != c.want {
			t.Errorf("%s: owes = %v, want %v", c.name, got, c.want)
		}
	}
}
