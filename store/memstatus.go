package store

/*
// go-sqlite3 links SQLite's amalgamation into the binary; its header is
// not on this package's include path, so declare what is called here.
extern int sqlite3_config(int, ...);
extern long long sqlite3_memory_used(void);

#define HG_SQLITE_CONFIG_MEMSTATUS 9

static int hg_sqlite3_memstatus_off(void) { return sqlite3_config(HG_SQLITE_CONFIG_MEMSTATUS, 0); }
static long long hg_sqlite3_memory_used(void) { return sqlite3_memory_used(); }
*/
import "C"

import "fmt"

// memstatusErr says why SQLite's allocator statistics are still on, if
// they are. go-sqlite3 builds SQLite with them on: every malloc and free
// then takes a global mutex to count itself. They can only be turned off
// before SQLite initialises, which the first connection does, so here, at
// package initialisation, before any Open.
var memstatusErr = memstatusOff()

func memstatusOff() error {
	if rc := C.hg_sqlite3_memstatus_off(); rc != 0 {
		return fmt.Errorf("sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0): result code %d", int(rc))
	}
	return nil
}

// sqliteMemoryUsed is SQLite's count of the bytes it has allocated; it
// stays 0 while allocator statistics are off.
func sqliteMemoryUsed() int64 { return int64(C.hg_sqlite3_memory_used()) }
