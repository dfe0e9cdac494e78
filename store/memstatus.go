package store

/*
// go-sqlite3 links SQLite's amalgamation into the binary; its header is
// not on this package's include path, so declare what is called here.
extern long long sqlite3_memory_used(void);
static long long hg_sqlite3_memory_used(void) { return sqlite3_memory_used(); }
*/
import "C"

// sqliteMemoryUsed is SQLite's count of the bytes it has allocated; it
// stays 0 while allocator statistics are off.
func sqliteMemoryUsed() int64 { return int64(C.hg_sqlite3_memory_used()) }
