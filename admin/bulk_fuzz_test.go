package admin

import (
	"errors"
	"testing"

	"github.com/hookgate/hookgate/httperror"
	"github.com/hookgate/hookgate/store"
)

// FuzzParseBulkFilter: any body is a filter or an API error, never a
// panic; an accepted filter has a retryable state, bounded names and, but
// for "all", a route, source or since.
func FuzzParseBulkFilter(f *testing.F) {
	for _, s := range []string{`{"route":"a"}`, `{"all":true}`, `{"source":"s","state":"retrying"}`,
		`{"since":"2024-05-01T00:00:00Z","until":"2024-05-02T00:00:00.5+02:00"}`, `{"route":"a","x":1}`, `{}`, `[`,
		`{"route":"a","until":"0001-01-01T00:00:00Z"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		flt, err := parseBulkFilter(body)
		if err != nil {
			var he *httperror.Error
			if !errors.As(err, &he) || he.Status < 400 || he.Status > 499 {
				t.Fatalf("error %v is not a 4xx API error", err)
			}
			return
		}
		if flt.State != store.StateDead && flt.State != store.StateRetrying {
			t.Fatalf("state %q accepted", flt.State)
		}
		if len(flt.Route) > bulkMaxName || len(flt.Source) > bulkMaxName {
			t.Fatalf("a name of %d/%d bytes accepted", len(flt.Route), len(flt.Source))
		}
		if (!flt.Since.IsZero() && flt.Since.Unix() < 0) || (!flt.Until.IsZero() && flt.Until.Unix() < 0) {
			t.Fatalf("a bound before 1970 accepted: %v, %v", flt.Since, flt.Until)
		}
		if !flt.Since.IsZero() && !flt.Until.IsZero() && !flt.Since.Before(flt.Until) {
			t.Fatalf("since %v not before until %v", flt.Since, flt.Until)
		}
	})
}
