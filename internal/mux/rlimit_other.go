//go:build !unix

package mux

import "math"

// RaiseOpenFileLimit has nothing to raise where there is no RLIMIT_NOFILE.
func RaiseOpenFileLimit() (uint64, error) { return math.MaxUint64, nil }

// openFileLimit is 0 (unknown) where there is no RLIMIT_NOFILE.
func openFileLimit() uint64 { return 0 }
