package store

import (
	"cmp"
	"slices"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
)

// Change is one committed change of a stored object, as a watch event carries it: Old is nil for
// a creation, New is nil for a removal. Both are the stored objects themselves, shared with
// every reader: whoever gets them must not modify them.
type Change struct {
	Resource schema.GroupResource
	// Key is the object's key, "namespace/name" or "name" (storage.Key): the store's own string,
	// which a handler keeping it for as long as the object exists holds at no extra cost.
	Key      string
	Old, New client.Object
	// Relocated: nothing changed, New is Old moved to fresh memory (the same version; storage's
	// relocate.go). A cache that holds Old keeps New instead; there is nothing to react to.
	Relocated bool
}

// ChangeHandler receives a cluster's committed changes in commit order, while the cluster's
// lock is held (in-process and HTTP writes alike): it must be quick and must not call the
// cluster. Simulated controllers use it as an informer's event handler: update a cache, queue
// a key, and do the work later, outside the lock.
type ChangeHandler func(Change)

// informer is one Inform registration.
type informer struct {
	resources map[schema.GroupResource]bool
	all       bool // every resource (InformAll)
	handle    ChangeHandler
}

// Inform hands h every current object of the resources as a creation, then every committed
// change of them, until the returned stop is called (after which h is not called again). The
// two are one atomic step under the cluster's lock, so h misses nothing and sees nothing twice,
// like an informer's list and watch. A closed cluster informs nothing.
func (c *Cluster) Inform(resources []schema.GroupResource, h ChangeHandler) (stop func()) {
	inf := &informer{resources: map[schema.GroupResource]bool{}, handle: h}
	for _, gr := range resources {
		inf.resources[gr] = true
	}
	return c.inform(inf, resources)
}

// InformAll is Inform for every resource the cluster stores, built in or defined by CRDs, those
// a CRD defines later too (as the garbage collector follows every kind through discovery). The
// current objects of the resources in first come first, in that order, then the others'.
func (c *Cluster) InformAll(first []schema.GroupResource, h ChangeHandler) (stop func()) {
	return c.inform(&informer{all: true, handle: h}, first)
}

func (c *Cluster) inform(inf *informer, resources []schema.GroupResource) (stop func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return func() {}
	}
	if inf.all {
		var rest []schema.GroupResource
		for gr := range c.objs.All() {
			if !slices.Contains(resources, gr) {
				rest = append(rest, gr)
			}
		}
		slices.SortFunc(rest, func(a, b schema.GroupResource) int {
			return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Resource, b.Resource))
		})
		resources = append(slices.Clone(resources), rest...)
	}
	for _, gr := range resources {
		m := c.objs.Resource(gr)
		for _, key := range storage.Keys(m, "") {
			inf.handle(Change{Resource: gr, Key: key, New: m[key].Object()})
		}
	}
	c.informers = append(c.informers, inf)
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, x := range c.informers {
			if x == inf {
				c.informers = append(c.informers[:i:i], c.informers[i+1:]...)
				break
			}
		}
		if len(c.informers) == 0 {
			c.informers = nil
		}
	}
}

// informRelocatedLocked tells the informers of its resource that a stored version moved.
// Callers hold c.mu.
func (c *Cluster) informRelocatedLocked(r storage.Relocation) {
	for _, inf := range c.informers {
		if inf.all || inf.resources[r.GR] {
			inf.handle(Change{Resource: r.GR, Key: r.Key, Old: r.Old, New: r.New, Relocated: true})
		}
	}
}

// informLocked passes a committed change to the informers of its resource. Callers hold c.mu.
func (c *Cluster) informLocked(gr schema.GroupResource, key string, old, obj client.Object) {
	for _, inf := range c.informers {
		if inf.all || inf.resources[gr] {
			inf.handle(Change{Resource: gr, Key: key, Old: old, New: obj})
		}
	}
}
