package gatewaytest

import (
	"context"
	"database/sql"
	"testing"

	_ "github.com/mattn/go-sqlite3" // the driver the store uses
)

// FillEvents adds n events of source to the store's SQLite file at path
// (made by store.Open and closed again) in one statement: "e1" … "en",
// received one millisecond apart from receivedAt (unix ms), each body a
// JSON object {"pad":[[],[],…],"n":i} of about size bytes, whose
// thousands of nodes make a search by a body field slow (about a second
// per 300 MB on a laptop). Published, so the relay leaves them alone.
func FillEvents(t testing.TB, path, source string, n, size int, receivedAt int64) {
	t.Helper()
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	// zeroblob(k) is 2k hex zeros; each "00" becomes "[],".
	if _, err := tx.ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
		INSERT INTO events (source, event_id, event_type, content_type, body, received_at)
		SELECT ?, 'e' || i, 'fill', 'application/json',
			CAST('{"pad":[' || replace(hex(zeroblob(?)), '00', '[],') || '[]],"n":' || i || '}' AS BLOB), ? + i
		FROM n`, n, source, max(size/3, 1), receivedAt); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO published (seq, stream_seq, published_at)
		SELECT seq, seq, received_at FROM events WHERE event_type = 'fill' AND source = ?`, source); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}
