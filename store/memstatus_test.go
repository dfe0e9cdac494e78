package store

import (
	"context"
	"testing"
)

// TestSQLiteAllocatorStatisticsOff: SQLite keeps no allocator statistics
// (each malloc and free would take a global mutex to count itself).
func TestSQLiteAllocatorStatisticsOff(t *testing.T) {
	s := openTest(t, "")
	if _, err := s.Claim(context.Background(), testEvent("evt_memstatus")); err != nil {
		t.Fatal(err)
	}
	if n := sqliteMemoryUsed(); n != 0 {
		t.Fatalf("SQLite counted %d bytes allocated: its allocator statistics are on", n)
	}
}
