//go:build !unix

package mux

import "math"

// benchRaiseFileLimit has nothing to raise where there is no RLIMIT_NOFILE.
func benchRaiseFileLimit(uint64) (uint64, error) { return math.MaxUint64, nil }
