package store

import (
	"os"

	"golang.org/x/sys/unix"
)

// Filesystems where a zero-filled WAL saves nothing: copy-on-write ones
// write new blocks anyway, and tmpfs would hold the zeros in memory.
const (
	btrfsMagic = 0x9123683e
	zfsMagic   = 0x2fc12fc1
	tmpfsMagic = 0x01021994
)

// fillsPay reports whether zero-filling a file on the filesystem of path
// pays, and the filesystem's name when it does not.
func fillsPay(path string) (bool, string) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return true, ""
	}
	switch uint32(st.Type) {
	case btrfsMagic:
		return false, "btrfs"
	case zfsMagic:
		return false, "zfs"
	case tmpfsMagic:
		return false, "tmpfs"
	}
	return true, ""
}

// willNeed asks the kernel to read n bytes of f from off into its cache,
// beside the caller (readahead).
func willNeed(f *os.File, off, n int64) {
	_ = unix.Fadvise(int(f.Fd()), off, n, unix.FADV_WILLNEED)
}
