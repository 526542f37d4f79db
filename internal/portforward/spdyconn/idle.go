package spdyconn

import (
	"sync"
	"sync/atomic"
	"time"
)

// idleTimer calls expire once no frame went in or out for the timeout, as spdystream's
// idle timeout does. Frames only record the time (an atomic store, not a timer reset
// per frame); the timer, when it fires early, sleeps again for the time left.
type idleTimer struct {
	epoch time.Time    // monotonic base of last
	last  atomic.Int64 // nanoseconds since epoch at the last frame

	mu      sync.Mutex
	timeout time.Duration // zero: no timeout
	timer   *time.Timer
	stopped bool
	expire  func()
}

func newIdleTimer(expire func()) *idleTimer {
	return &idleTimer{epoch: time.Now(), expire: expire}
}

// touch records a frame.
func (t *idleTimer) touch() { t.last.Store(int64(time.Since(t.epoch))) }

// set starts, restarts or (with zero) disables the timeout, counting from now.
func (t *idleTimer) set(timeout time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.touch()
	t.timeout = timeout
	switch {
	case timeout <= 0:
		if t.timer != nil {
			t.timer.Stop()
		}
	case t.timer == nil:
		t.timer = time.AfterFunc(timeout, t.fire)
	default:
		t.timer.Reset(timeout)
	}
}

func (t *idleTimer) fire() {
	t.mu.Lock()
	if t.stopped || t.timeout <= 0 {
		t.mu.Unlock()
		return
	}
	idle := time.Since(t.epoch) - time.Duration(t.last.Load())
	if idle < t.timeout {
		t.timer.Reset(t.timeout - idle)
		t.mu.Unlock()
		return
	}
	t.stopped = true
	t.mu.Unlock()
	t.expire()
}

// stop disables the timer for good.
func (t *idleTimer) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	if t.timer != nil {
		t.timer.Stop()
	}
}
