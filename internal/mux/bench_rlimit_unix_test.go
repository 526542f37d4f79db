//go:build unix

package mux

import "syscall"

// benchRaiseFileLimit raises the open file limit to at least want, the hard limit too when the
// process may (CAP_SYS_RESOURCE), and returns the limit in force.
func benchRaiseFileLimit(want uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur >= want {
		return lim.Cur, nil
	}
	raised := syscall.Rlimit{Cur: want, Max: max(lim.Max, want)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
		return lim.Cur, err
	}
	return want, nil
}
