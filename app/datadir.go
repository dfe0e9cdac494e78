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
)

// LockFile is the file in data_dir that a running gateway holds locked.
const LockFile = "LOCK"

// DataDirInUseError is returned by LockDataDir when another process holds
// the lock.
type DataDirInUseError struct {
	Dir string
	PID int // 0 if the holder's pid could not be read
}

func (e *DataDirInUseError) Error() string {
	if e.PID == 0 {
		return fmt.Sprintf("data_dir %s is in use by another process", e.Dir)
	}
	return fmt.Sprintf("data_dir %s is in use by pid %d", e.Dir, e.PID)
}

// LockDataDir creates dir if needed and takes an exclusive flock on
// dir/LOCK, writing this process's pid into it. The lock lasts until
// release is called or the process ends (a crash frees it too; the file
// stays). A lock held elsewhere is a *DataDirInUseError.
func LockDataDir(dir string) (release func() error, err error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("data_dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data_dir %s: %w", dir, err)
	}
	if err := flock(f); err != nil {
		_ = f.Close() // nothing was written through f
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &DataDirInUseError{Dir: dir, PID: holder(path)}
		}
		return nil, fmt.Errorf("data_dir %s: lock %s: %w", dir, path, err)
	}
	// The pid only informs a second gateway; a full disk must not stop
	// this one.
	_ = writePID(f)
	return f.Close, nil
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
