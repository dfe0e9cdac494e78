//go:build !linux

package store

import "os"

// fillsPay reports whether zero-filling a file on the filesystem of path
// pays: only Linux's filesystems are told apart.
func fillsPay(string) (bool, string) { return true, "" }

// willNeed does nothing: readahead advice is Linux's.
func willNeed(*os.File, int64, int64) {}
