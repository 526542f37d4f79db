package store

import (
	"slices"
	"time"
)

// FreshWait is how long a read at a resourceVersion the cluster has not reached yet waits for it
// before answering 504 "Too large resource version", as kube-apiserver's watch cache waits
// (its blockTimeout) for a client that saw a newer state elsewhere, e.g. from another replica.
const FreshWait = 3 * time.Second

// rvWaiter is a read waiting for the cluster's resourceVersion to reach rv.
type rvWaiter struct {
	rv      uint64
	reached chan struct{} // closed once rv is reached or the cluster is closed
}

// WaitForResourceVersion waits until the cluster has reached resourceVersion rv (a GET's or a
// LIST's "at least as new as"), up to FreshWait; "" and "0" need nothing. It answers 400 for a
// malformed resourceVersion and upstream's 504 (cause ResourceVersionTooLarge, Retry-After 1)
// when the wait ends first.
func (c *Cluster) WaitForResourceVersion(rv string) error {
	if rv == "" || rv == "0" {
		return nil
	}
	want, err := parseRV(rv)
	if err != nil {
		return err
	}
	return c.waitFresh(want)
}

// waitFresh waits until the cluster's resourceVersion reaches rv, up to FreshWait.
func (c *Cluster) waitFresh(rv uint64) error {
	c.mu.RLock()
	cur := c.objs.ResourceVersion()
	c.mu.RUnlock()
	if cur >= rv {
		return nil
	}
	deadline := time.NewTimer(FreshWait)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		cur = c.objs.ResourceVersion()
		if cur >= rv || c.closed {
			c.mu.Unlock()
			break
		}
		w := rvWaiter{rv: rv, reached: make(chan struct{})}
		c.rvWaiters = append(c.rvWaiters, w)
		c.mu.Unlock()
		select {
		case <-w.reached:
			continue
		case <-deadline.C:
			c.mu.Lock()
			c.rvWaiters = slices.DeleteFunc(c.rvWaiters, func(x rvWaiter) bool { return x.reached == w.reached })
			cur = c.objs.ResourceVersion()
			c.mu.Unlock()
		}
		break
	}
	if cur >= rv {
		return nil
	}
	return tooLargeRV(rv, cur, 1)
}

// wakeRVWaitersLocked releases the reads waiting for a resourceVersion up to rv (all of them when
// the cluster is closed). Callers hold c.mu exclusively.
func (c *Cluster) wakeRVWaitersLocked(rv uint64) {
	c.rvWaiters = slices.DeleteFunc(c.rvWaiters, func(w rvWaiter) bool {
		if w.rv <= rv || c.closed {
			close(w.reached)
			return true
		}
		return false
	})
	if len(c.rvWaiters) == 0 {
		c.rvWaiters = nil
	}
}
