//go:build unix

package harness

import (
	"os"
	"syscall"
)

// tryLock takes an exclusive advisory lock on f without waiting; the kernel drops it when f is
// closed or the process exits, so a killed test leaves no stale reservation.
func tryLock(f *os.File) bool {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
}
