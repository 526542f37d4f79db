//go:build unix

package mux

import "syscall"

// RaiseOpenFileLimit raises the soft limit of open files (RLIMIT_NOFILE) to the hard limit, as
// the Go runtime does at start since Go 1.19 (then this changes nothing), and returns the limit
// in force. Every listener is a file, and so is every connection to it.
func RaiseOpenFileLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur < lim.Max {
		raised := lim
		raised.Cur = raised.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
			return uint64(lim.Cur), err
		}
		lim = raised
	}
	return uint64(lim.Cur), nil
}

// openFileLimit is the open file limit in force (RLIMIT_NOFILE's soft limit), 0 if unknown.
func openFileLimit() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	return uint64(lim.Cur)
}
