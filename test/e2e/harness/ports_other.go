//go:build !unix

package harness

import "os"

// tryLock has no advisory lock to take outside Unix: reservations are then per process only.
func tryLock(*os.File) bool { return true }
