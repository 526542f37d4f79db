package store

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
)

// The garbage collector's part: owner references, propagation policies (background, foreground,
// orphan) and dependents of removed owners, run at once on every committed removal instead of by
// a controller watching the cluster.

func (c *Cluster) indexOwners(gr schema.GroupResource, key string, obj client.Object) {
	for _, ref := range obj.GetOwnerReferences() {
		if c.deps == nil {
			c.deps = map[types.UID]map[objRef]struct{}{}
		}
		set := c.deps[ref.UID]
		if set == nil {
			set = map[objRef]struct{}{}
			c.deps[ref.UID] = set
		}
		set[objRef{gr, key}] = struct{}{}
	}
}

func (c *Cluster) unindexOwners(gr schema.GroupResource, key string, obj client.Object) {
	for _, ref := range obj.GetOwnerReferences() {
		if set := c.deps[ref.UID]; set != nil {
			delete(set, objRef{gr, key})
			if len(set) == 0 {
				delete(c.deps, ref.UID)
			}
		}
	}
}

// ownerOf resolves an owner reference of an object in namespace to the stored owner, if it exists
// with the referenced UID.
func (c *Cluster) ownerOf(namespace string, ref metav1.OwnerReference) (*servedResource, client.Object) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil, nil
	}
	b, ok := c.resourceForKind(gv.WithKind(ref.Kind))
	if !ok {
		return nil, nil
	}
	if b.storedAs != nil {
		b = b.storedAs
	}
	ns := namespace
	if !b.info.Namespaced {
		ns = ""
	}
	obj := c.getLocked(b.info.GVR.GroupResource(), storage.Key(ns, ref.Name))
	if obj == nil || obj.GetUID() != ref.UID {
		return nil, nil
	}
	return b, obj
}

// ownerAlive reports whether the owner a reference names still exists. Owners of kinds this
// store does not serve cannot be checked and count as alive, so their dependents are kept, as the
// real garbage collector keeps dependents whose owners it cannot resolve.
func (c *Cluster) ownerAlive(namespace string, ref metav1.OwnerReference) bool {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return true
	}
	if _, ok := c.resourceForKind(gv.WithKind(ref.Kind)); !ok {
		return true
	}
	_, o := c.ownerOf(namespace, ref)
	return o != nil
}

// collectDependents deletes the dependents of a removed owner whose owners are now all gone, and
// drops the dangling reference from dependents that still have a live owner (the GC's job).
func (c *Cluster) collectDependents(owner client.Object) {
	for ref := range c.deps[owner.GetUID()] {
		dep := c.getLocked(ref.gr, ref.key)
		if dep == nil {
			continue
		}
		db, _ := c.resourceForGR(ref.gr)
		alive := false
		for _, r := range dep.GetOwnerReferences() {
			if r.UID == owner.GetUID() {
				continue
			}
			if c.ownerAlive(dep.GetNamespace(), r) {
				alive = true
			}
		}
		if alive {
			c.dropOwnerRef(db, dep, owner.GetUID())
			continue
		}
		c.controllerDeleteLocked(db, dep, metav1.DeletePropagationBackground, nil)
	}
}

// orphanDependents removes the owner's references from its dependents.
func (c *Cluster) orphanDependents(owner client.Object) {
	for ref := range c.deps[owner.GetUID()] {
		if dep := c.getLocked(ref.gr, ref.key); dep != nil {
			db, _ := c.resourceForGR(ref.gr)
			c.dropOwnerRef(db, dep, owner.GetUID())
		}
	}
}

func (c *Cluster) dropOwnerRef(b *servedResource, dep client.Object, uid types.UID) {
	next := dep.DeepCopyObject().(client.Object)
	var refs []metav1.OwnerReference
	for _, r := range next.GetOwnerReferences() {
		if r.UID != uid {
			refs = append(refs, r)
		}
	}
	next.SetOwnerReferences(refs)
	c.storeLocked(b.info.GVR.GroupResource(), next, dep)
}

// afterOwnersChanged lets owners in foreground deletion finish when a dependent left them.
func (c *Cluster) afterOwnersChanged(namespace string, before, after []metav1.OwnerReference) {
	for _, r := range before {
		still := false
		for _, a := range after {
			if a.UID == r.UID && a.BlockOwnerDeletion != nil && *a.BlockOwnerDeletion {
				still = true
			}
		}
		if still {
			continue
		}
		if ob, o := c.ownerOf(namespace, r); o != nil {
			c.finishForeground(ob, o.GetNamespace(), o.GetName())
		}
	}
}

// finishForeground completes a foreground deletion once no dependent blocks it.
func (c *Cluster) finishForeground(b *servedResource, namespace, name string) {
	gr := b.info.GVR.GroupResource()
	owner := c.getLocked(gr, storage.Key(namespace, name))
	if owner == nil || owner.GetDeletionTimestamp() == nil || !hasFinalizer(owner, metav1.FinalizerDeleteDependents) {
		return
	}
	for ref := range c.deps[owner.GetUID()] {
		dep := c.getLocked(ref.gr, ref.key)
		if dep == nil {
			continue
		}
		for _, r := range dep.GetOwnerReferences() {
			if r.UID == owner.GetUID() && r.BlockOwnerDeletion != nil && *r.BlockOwnerDeletion {
				return
			}
		}
	}
	next := owner.DeepCopyObject().(client.Object)
	next.SetFinalizers(without(next.GetFinalizers(), metav1.FinalizerDeleteDependents))
	if len(next.GetFinalizers()) == 0 {
		c.eraseLocked(gr, owner, next)
		return
	}
	c.storeLocked(gr, next, owner)
}

func hasFinalizer(obj client.Object, f string) bool {
	for _, x := range obj.GetFinalizers() {
		if x == f {
			return true
		}
	}
	return false
}

func without(list []string, s string) []string {
	var out []string
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}
