//go:build !linux

package azure

import (
	"errors"
	"fmt"
	"runtime"
)

// newSystemIPTables fails: iptables exists only on Linux.
func newSystemIPTables(bool) (IPTables, error) {
	return nil, fmt.Errorf("iptables is only available on Linux, not on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}
