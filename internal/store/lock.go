package store

import (
	"sync"
	"sync/atomic"
	"time"
)

// clusterLock is a cluster's RWMutex. Every reader and writer of the cluster waits on its
// exclusive holds, so how long one request holds it is a bound like a body size: the fuzz
// targets time those holds (TimeLockHolds) and fail an input that holds it too long. Untimed,
// a hold costs one atomic load more than a plain RWMutex.
type clusterLock struct {
	sync.RWMutex
	since time.Time // start of the current exclusive hold, while timing
}

var (
	lockTiming  atomic.Bool
	longestHold atomic.Int64 // nanoseconds
)

func (l *clusterLock) Lock() {
	l.RWMutex.Lock()
	if lockTiming.Load() {
		l.since = time.Now()
	}
}

func (l *clusterLock) Unlock() {
	if !l.since.IsZero() {
		held := int64(time.Since(l.since))
		l.since = time.Time{}
		for {
			longest := longestHold.Load()
			if held <= longest || longestHold.CompareAndSwap(longest, held) {
				break
			}
		}
	}
	l.RWMutex.Unlock()
}

// TimeLockHolds starts (or stops) timing the exclusive holds of every cluster's lock; for
// tests, which read the result with LongestLockHold.
func TimeLockHolds(on bool) { lockTiming.Store(on) }

// LongestLockHold returns the longest exclusive hold of any cluster's lock timed since the last
// call, and starts over.
func LongestLockHold() time.Duration { return time.Duration(longestHold.Swap(0)) }
