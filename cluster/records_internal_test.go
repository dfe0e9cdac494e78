package cluster

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/hookgate/hookgate/store"
)

// FuzzDecodeRecord: whatever a message of the records stream holds, it
// is decoded or refused without a panic, and a record it decodes to is
// applied to a store without an error (a record that could not be
// applied would stop the gateway's applier for good).
func FuzzDecodeRecord(f *testing.F) {
	f.Add(store.EventRecordSubject, `{"origin":"gw1","source":"s","id":"e1","type":"t","headers":{"User-Agent":"x"},"received_at":1,"scope":"a"}`, []byte(`{"id":"e1"}`))
	f.Add(store.EventRecordSubject, `{"origin":"gw1","source":"_task","id":"t1","received_at":-5,"scope":"sc"}`, []byte{0xff, 0})
	f.Add(store.RoundRecordSubject, "", []byte(`{"origin":"gw2","route":"r","source":"s","event_id":"e1","idempotency_key":"hg_x","state":"succeeded","attempts":2,"rounds":1,"last_status":200,"created_at":1,"updated_at":2,"version":7,"first_attempt":2,"attempt_list":[{"started_at":1,"duration_ms":3,"status":200,"response":"b2s="}]}`))
	f.Add(store.RoundRecordSubject, "", []byte(`{"origin":"gw2","route":"r","source":"s","event_id":"e1","version":18446744073709551615,"first_attempt":-3,"attempt_list":[{},{}]}`))
	f.Add(store.StateRecordSubject, "", []byte(`{"origin":"gw2","route":"r","source":"s","event_id":"e1","idempotency_key":"hg_x","state":"pending","attempts":1,"rounds":1,"created_at":1,"updated_at":2,"version":9}`))
	f.Add(store.StateRecordSubject, "", []byte(`{"origin":"gw2","route":"r","source":"s","event_id":"e2","state":"dead","attempts":-1,"version":18446744073709551615}`))
	f.Add("hookgate.records.later", "", []byte("x"))
	st, err := store.Open(context.Background(), store.Config{Path: filepath.Join(f.TempDir(), "hookgate.db")},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = st.Close() })
	var seq uint64
	f.Fuzz(func(t *testing.T, subject, meta string, data []byte) {
		rec, err := decodeRecord(subject, meta, data, "self")
		if err != nil || (rec.Event == nil && rec.Round == nil && rec.State == nil) {
			return
		}
		seq++
		if err := st.ApplyRecords(context.Background(), []store.Record{rec}, seq); err != nil {
			t.Fatalf("a decoded record was not applied: %v", err)
		}
	})
}
