package store

import (
	"context"
	"database/sql"
	"testing"

	"github.com/mattn/go-sqlite3"
)

// TestConnectionsWithoutMutex: every connection (the writer, the readers,
// the checkpointer) is opened without SQLite's per-connection mutex, which
// each call into SQLite (every bound argument) would otherwise lock and
// unlock: database/sql already gives a connection to one goroutine at a
// time.
func TestConnectionsWithoutMutex(t *testing.T) {
	s := openTest(t, "")
	for name, db := range map[string]*sql.DB{"writer": s.w, "reader": s.r, "checkpointer": s.ckpt} {
		conn, err := db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		err = conn.Raw(func(dc any) error {
			c, ok := dc.(*sqlite3.SQLiteConn)
			if !ok {
				t.Fatalf("%s: driver connection is a %T", name, dc)
			}
			has, err := connHasMutex(c)
			if err != nil {
				return err
			}
			if has {
				t.Errorf("%s: SQLite takes the connection's mutex in every call", name)
			}
			return nil
		})
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}
