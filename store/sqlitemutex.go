package store

/*
// go-sqlite3 links SQLite's amalgamation into the binary; its header is
// not on this package's include path, so declare what is called here.
typedef struct sqlite3 sqlite3;
extern void *sqlite3_db_mutex(sqlite3 *);
static int hg_has_mutex(void *db) { return sqlite3_db_mutex((sqlite3 *)db) != 0; }
*/
import "C"

import (
	"fmt"
	"reflect"

	"github.com/mattn/go-sqlite3"
)

// connHasMutex reports whether SQLite takes a mutex of c's connection in
// each call on it (every sqlite3_bind_* among them), as it does unless the
// connection was opened without (SQLITE_OPEN_NOMUTEX, go-sqlite3's
// _mutex=no). go-sqlite3 does not give its handle out: it is read from
// its unexported field.
func connHasMutex(c *sqlite3.SQLiteConn) (bool, error) {
	f := reflect.ValueOf(c).Elem().FieldByName("db")
	if !f.IsValid() || f.Kind() != reflect.Pointer {
		return false, fmt.Errorf("go-sqlite3's connection has no db handle field")
	}
	return C.hg_has_mutex(f.UnsafePointer()) != 0, nil
}
