package app

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hookgate/hookgate/config"
)

// LockFile is the file in data_dir, and in nats.store_dir with the
// embedded server, that a running gateway holds locked.
const LockFile = "LOCK"

// InUseError is returned by Lock when another process holds one of the
// gateway's locks.
type InUseError struct {
	Key  string // the config key of what is in use: data_dir, store.path or nats.store_dir
	Path string // its value
	PID  int    // 0 if the holder's pid could not be read
}

func (e *InUseError) Error() string {
	if e.PID == 0 {
		return fmt.Sprintf("%s %s is in use by another process", e.Key, e.Path)
	}
	return fmt.Sprintf("%s %s is in use by pid %d", e.Key, e.Path, e.PID)
}

// Lock takes an exclusive flock on each place a gateway writes, creating
// its directory if needed: data_dir/LOCK, store.path's lock file beside
// it (<store.path>.lock, beside the file a symlink names) and, with the
// embedded server, nats.store_dir/LOCK. Each holds this process's pid. store.path and
// nats.store_dir may be outside data_dir, so two gateways with their own
// data_dir still cannot share them. A lock file that is one already taken
// (nats.store_dir set to data_dir) is not locked twice. The locks last
// until release is called or the process ends (a crash frees them; the
// files stay). A lock held elsewhere is an *InUseError.
func Lock(cfg *config.Config) (release func() error, err error) {
	type lock struct{ key, path, dir, file string }
	db := cfg.Store.Path
	if real, err := filepath.EvalSymlinks(db); err == nil {
		db = real // two links to one file are one store
	}
	locks := []lock{
		{"data_dir", cfg.DataDir, cfg.DataDir, filepath.Join(cfg.DataDir, LockFile)},
		{"store.path", cfg.Store.Path, filepath.Dir(db), db + ".lock"},
	}
	if cfg.NATS.URL == "" {
		locks = append(locks, lock{"nats.store_dir", cfg.NATS.StoreDir, cfg.NATS.StoreDir,
			filepath.Join(cfg.NATS.StoreDir, LockFile)})
	}
	var held []heldLock
	release = func() error {
		var errs []error
		for _, h := range held {
			errs = append(errs, h.f.Close())
		}
		return errors.Join(errs...)
	}
	for _, l := range locks {
		h, err := lockFile(l.key, l.path, l.dir, l.file, held)
		if err != nil {
			_ = release() // the locks taken so far end with the files
			return nil, err
		}
		if h.f != nil {
			held = append(held, h)
		}
	}
	return release, nil
}

type heldLock struct {
	f  *os.File
	fi os.FileInfo
}

// lockFile creates dir if needed and locks file, for the config key whose
// value is path. It returns a zero heldLock if file is one of held.
func lockFile(key, path, dir, file string, held []heldLock) (heldLock, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return heldLock{}, fmt.Errorf("%s %s: %w", key, path, err)
	}
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return heldLock{}, fmt.Errorf("%s %s: %w", key, path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close() // nothing was written through f
		return heldLock{}, fmt.Errorf("%s %s: %w", key, path, err)
	}
	for _, h := range held {
		if os.SameFile(fi, h.fi) {
			_ = f.Close() // nothing was written through f
			return heldLock{}, nil
		}
	}
	if err := flock(f); err != nil {
		_ = f.Close() // nothing was written through f
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return heldLock{}, &InUseError{Key: key, Path: path, PID: holder(file)}
		}
		return heldLock{}, fmt.Errorf("%s %s: lock %s: %w", key, path, file, err)
	}
	// The pid only informs a second gateway; a full disk must not stop
	// this one.
	_ = writePID(f)
	return heldLock{f: f, fi: fi}, nil
}

func flock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

func writePID(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return err
}

// holder reads the pid in a lock file held by another process. The holder
// writes it just after locking, so an empty file is read again for a
// moment.
func holder(path string) int {
	for i := 0; i < 20; i++ {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			return pid
		}
		time.Sleep(25 * time.Millisecond)
	}
	return 0
}
