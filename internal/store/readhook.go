package store

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ReadHook runs before a read (get, list, watch) of its resource in namespace ("" for all
// namespaces), in the reader's goroutine and outside the cluster's lock, so it may write through
// the cluster's client (but must not read through it: a read would call it again). A simulated
// component that writes only when somebody looks, as the kubelets' node leases, renews there; it
// must be quick when it has nothing to do.
type ReadHook func(namespace string)

// readHook is one OnRead registration.
type readHook struct {
	gr schema.GroupResource
	h  ReadHook
}

// OnRead calls h before every read of the resource until the returned stop is called. Reads cost
// one atomic load while no hook is registered.
func (c *Cluster) OnRead(gr schema.GroupResource, h ReadHook) (stop func()) {
	hook := &readHook{gr: gr, h: h}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setReadHooksLocked(append(c.loadReadHooks(), hook))
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		var rest []*readHook
		for _, x := range c.loadReadHooks() {
			if x != hook {
				rest = append(rest, x)
			}
		}
		c.setReadHooksLocked(rest)
	}
}

func (c *Cluster) loadReadHooks() []*readHook {
	if p := c.readHooks.Load(); p != nil {
		return *p
	}
	return nil
}

// setReadHooksLocked publishes a new slice (never modified after): readers load it without the lock.
func (c *Cluster) setReadHooksLocked(hooks []*readHook) {
	if len(hooks) == 0 {
		c.readHooks.Store(nil)
		return
	}
	c.readHooks.Store(&hooks)
}

// beforeRead runs the read hooks of gr. Callers do not hold c.mu.
func (c *Cluster) beforeRead(gr schema.GroupResource, namespace string) {
	p := c.readHooks.Load()
	if p == nil {
		return
	}
	for _, x := range *p {
		if x.gr == gr {
			x.h(namespace)
		}
	}
}
