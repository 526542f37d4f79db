package spdyconn

import "time"

// SetStallTimeout sets the stall timeout until the returned function restores it.
func SetStallTimeout(d time.Duration) (restore func()) {
	old := stallTimeoutNanos.Swap(int64(d))
	return func() { stallTimeoutNanos.Store(old) }
}

// Buffered is the data c's streams hold for their readers.
func Buffered(c *Conn) int64 { return c.buffered.Load() }
