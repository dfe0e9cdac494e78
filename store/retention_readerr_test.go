package store

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mattn/go-sqlite3"
)

// A read that fails in the middle of a prune's page is the prune's error,
// not the end of the table: the table's second leaf page is corrupted on
// disk, so rows.Next fails (SQLITE_CORRUPT) after the first leaf's rows. (A
// failure at the first row is Query's error: the driver steps in Query.)
//
// Unchecked, the events' read error let the prune carry on with a short
// page and release its savepoint, and the group commit it shared failed
// (ErrUnavailable: every write batched with it failed too). For attempts,
// the DELETE after the read steps onto the same page and fails anyway; the
// subtest holds that either way.
func TestPruneReadErrorIsNotTheEnd(t *testing.T) {
	t.Parallel()
	old := time.Now().Add(-48 * time.Hour)
	var evs []seedEvent
	for i := range 400 {
		evs = append(evs, seedEvent{id: fmt.Sprintf("evt_%03d", i), received: old, published: true,
			deliveries: map[string]string{"r": StateSucceeded}, attemptsAt: []time.Time{old, old, old}})
	}
	evs = append(evs, seedEvent{id: "evt_new", received: time.Now(), published: true})
	corrupt := func(err error) bool {
		var se sqlite3.Error
		return errors.As(err, &se) && se.Code == sqlite3.ErrCorrupt && !errors.Is(err, ErrUnavailable)
	}

	t.Run("events", func(t *testing.T) {
		t.Parallel()
		s := corruptedStore(t, evs, "events")
		keep := func(*OldEvent) bool { return true } // no deletes: only the read can fail
		res, next, more, err := s.PruneEvents(context.Background(), time.Now().Add(-time.Hour), EventCursor{}, 1000, keep)
		if !corrupt(err) || next != (EventCursor{}) {
			t.Fatalf("PruneEvents = %+v, next %+v, more %v, %v; want the read's error (SQLITE_CORRUPT, not ErrUnavailable)", res, next, more, err)
		}
	})
	t.Run("attempts", func(t *testing.T) {
		t.Parallel()
		s := corruptedStore(t, evs, "attempts")
		n, next, more, err := s.PruneAttempts(context.Background(), time.Now().Add(-time.Hour), AttemptCursor{}, 1000)
		if !corrupt(err) || next != (AttemptCursor{}) {
			t.Fatalf("PruneAttempts = %d, next %+v, more %v, %v; want the read's error (SQLITE_CORRUPT, not ErrUnavailable)", n, next, more, err)
		}
	})
}

// corruptedStore seeds a store, closes it, makes the second leaf page of
// table's B-tree unreadable (an invalid page type) and opens it again.
func corruptedStore(t *testing.T, evs []seedEvent, table string) *Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hookgate.db")
	s := openTest(t, path)
	seed(t, s, evs)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	db, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	var pageSize, root int64
	err = db.QueryRow(`PRAGMA wal_checkpoint(TRUNCATE)`).Scan(new(int), new(int), new(int))
	if err == nil {
		err = db.QueryRow(`PRAGMA page_size`).Scan(&pageSize)
	}
	if err == nil {
		err = db.QueryRow(`SELECT rootpage FROM sqlite_schema WHERE type = 'table' AND name = ?`, table).Scan(&root)
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}

	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := make([]byte, pageSize)
	for pgno, i := root, 1; ; i = 0 {
		if _, err := f.ReadAt(page, (pgno-1)*pageSize); err != nil {
			t.Fatal(err)
		}
		switch page[0] {
		case 0x02, 0x05: // interior: the root's second child, then leftmost
			if binary.BigEndian.Uint16(page[3:]) <= uint16(i) {
				t.Fatalf("%s: root page has too few children: seed more rows", table)
			}
			cell := binary.BigEndian.Uint16(page[12+2*i:])
			pgno = int64(binary.BigEndian.Uint32(page[cell:]))
			continue
		case 0x0a, 0x0d: // leaf
			if pgno == root {
				t.Fatalf("%s fits in one page: seed more rows", table)
			}
			if _, err := f.WriteAt([]byte{0xff}, (pgno-1)*pageSize); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("page %d of %s: unexpected page type %#x", pgno, table, page[0])
		}
		break
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return openTest(t, path)
}
