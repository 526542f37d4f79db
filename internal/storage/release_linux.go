//go:build linux

package storage

import "golang.org/x/sys/unix"

// releasePages drops size bytes of the database file's mapping, from data, from the process's
// resident set (madvise MADV_DONTNEED). The mapping is the file's, shared and read-only: its
// pages stay in the page cache and the next access maps them again, so nothing is lost.
func releasePages(data, size uintptr) error {
	if _, _, errno := unix.Syscall(unix.SYS_MADVISE, data, size, unix.MADV_DONTNEED); errno != 0 {
		return errno
	}
	return nil
}
