package simulate

import (
	"context"
	"slices"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// garbageCollector is kube-controller-manager's garbage collector: it follows every kind of the
// cluster (custom resources too) and deletes the dependents whose owners are all gone, as
// upstream's attemptToDeleteItem does: a dependent with no owner left is deleted (in the
// foreground when an owner waits for it and it has dependents of its own, else as its own
// orphan or foregroundDeletion finalizer says, background by default); one that still has an
// owner loses its references to the owners that are gone or wait for their dependents. An owner
// the registry marked for foreground deletion (foregroundDeletion finalizer) loses the finalizer
// once no dependent blocks it (blockOwnerDeletion); one marked orphan (orphan finalizer) first
// has its references removed from its dependents. Deletions carry the UID and resourceVersion
// the decision was made on, as upstream's do.
//
// Upstream keeps a graph of every object; this keeps only what it needs to find work: the
// dependents of each owner (keys, by owner UID), whether each owner is known to exist, and the
// owners in foreground deletion. Owners of kinds the cluster does not serve cannot be checked
// and count as existing, as upstream keeps retrying them.
type garbageCollector struct {
	c   *cluster
	idx int

	mu     sync.Mutex
	owners map[types.UID]*ownerState
}

// ownerState is what the collector knows of one owner UID that dependents reference.
type ownerState struct {
	dependents map[objKey]struct{}
	ref        metav1.OwnerReference // how a dependent names it
	namespace  string                // the namespace of the dependent that named it
	alive      bool                  // seen in the store, or checked there
	gone       bool                  // its removal was seen: never alive again
	foreground bool                  // being deleted in the foreground
}

const (
	gcObjectPrefix = "obj:"   // obj:<group>/<resource>/<namespace/name>: attempt to delete, orphan or finish
	gcOwnerPrefix  = "owner:" // owner:<uid>: check that a referenced owner exists
)

func newGarbageCollector(c *cluster, idx int) *garbageCollector {
	return &garbageCollector{c: c, idx: idx, owners: map[types.UID]*ownerState{}}
}

func (gc *garbageCollector) uncached() {}

// allResources: the collector watches every kind, those CRDs define later too.
func (gc *garbageCollector) allResources() {}

func (gc *garbageCollector) resources() []schema.GroupResource { return nil }

func objectItem(gr schema.GroupResource, key string) string {
	return gcObjectPrefix + gr.Group + "/" + gr.Resource + "/" + key
}

func parseObjectItem(item string) (schema.GroupResource, string) {
	rest := strings.TrimPrefix(item, gcObjectPrefix)
	group, rest, _ := strings.Cut(rest, "/")
	resource, key, _ := strings.Cut(rest, "/")
	return schema.GroupResource{Group: group, Resource: resource}, key
}

func (gc *garbageCollector) observe(ch store.Change) {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	obj := changedObject(ch)
	var self objKey // the object's key, made only when needed (most objects own nothing and have no owners)
	selfKey := func() objKey {
		if self.key == "" {
			self = objKey{ch.Resource, changedKey(ch)}
		}
		return self
	}
	var oldRefs, newRefs []metav1.OwnerReference
	if ch.Old != nil {
		oldRefs = ch.Old.GetOwnerReferences()
	}
	if ch.New != nil {
		newRefs = ch.New.GetOwnerReferences()
	}
	// The object as an owner.
	if o := gc.owners[obj.GetUID()]; o != nil {
		switch {
		case ch.New == nil:
			o.alive, o.gone, o.foreground = false, true, false
			for dep := range o.dependents {
				gc.c.enqueue(gc.idx, objectItem(dep.gr, dep.key))
			}
			if len(o.dependents) == 0 {
				delete(gc.owners, obj.GetUID())
			}
		case !o.gone:
			o.alive = true
		}
	}
	if ch.New != nil && ch.New.GetDeletionTimestamp() != nil {
		if deletingDependents(ch.New) {
			if o := gc.owners[obj.GetUID()]; o != nil && !o.foreground {
				o.foreground = true
				for dep := range o.dependents { // upstream attempts every dependent once
					gc.c.enqueue(gc.idx, objectItem(dep.gr, dep.key))
				}
			}
			gc.c.enqueue(gc.idx, objectItem(ch.Resource, selfKey().key))
		} else if hasFinalizer(ch.New, metav1.FinalizerOrphanDependents) {
			gc.c.enqueue(gc.idx, objectItem(ch.Resource, selfKey().key))
		}
	}
	// The object as a dependent.
	if slices.EqualFunc(oldRefs, newRefs, sameRef) {
		return
	}
	for _, r := range oldRefs {
		if !slices.ContainsFunc(newRefs, func(n metav1.OwnerReference) bool { return n.UID == r.UID }) {
			gc.dependentLeftLocked(r, selfKey())
		}
	}
	for _, r := range newRefs {
		if slices.ContainsFunc(oldRefs, func(o metav1.OwnerReference) bool { return o.UID == r.UID }) {
			continue // blockOwnerDeletion changed only: handled as it left
		}
		o := gc.owners[r.UID]
		if o == nil {
			o = &ownerState{dependents: map[objKey]struct{}{}, ref: r, namespace: obj.GetNamespace()}
			gc.owners[r.UID] = o
		}
		o.dependents[selfKey()] = struct{}{}
		if !o.alive {
			if o.gone {
				gc.c.enqueue(gc.idx, objectItem(ch.Resource, selfKey().key))
			} else {
				gc.c.enqueue(gc.idx, gcOwnerPrefix+string(r.UID))
			}
		}
	}
	if ch.New == nil {
		return
	}
	for _, r := range newRefs { // a blocking reference turned non-blocking
		if old := slices.IndexFunc(oldRefs, func(o metav1.OwnerReference) bool { return o.UID == r.UID }); old >= 0 && blocks(oldRefs[old]) && !blocks(r) {
			gc.ownerMayFinishLocked(r.UID)
		}
	}
}

// dependentLeftLocked forgets that dep references the owner (the reference was removed, or dep
// was), and lets an owner in foreground deletion finish.
func (gc *garbageCollector) dependentLeftLocked(r metav1.OwnerReference, dep objKey) {
	o := gc.owners[r.UID]
	if o == nil {
		return
	}
	gc.ownerMayFinishLocked(r.UID)
	delete(o.dependents, dep)
	if len(o.dependents) == 0 && !o.foreground {
		delete(gc.owners, r.UID)
	}
}

// ownerMayFinishLocked queues an owner in foreground deletion, which finishes once no dependent
// blocks it.
func (gc *garbageCollector) ownerMayFinishLocked(uid types.UID) {
	o := gc.owners[uid]
	if o == nil || !o.foreground {
		return
	}
	if info, ok := gc.c.store.ResourceForKind(schema.FromAPIVersionAndKind(o.ref.APIVersion, o.ref.Kind)); ok {
		ns := o.namespace
		if !info.Namespaced {
			ns = ""
		}
		gc.c.enqueue(gc.idx, objectItem(info.GVR.GroupResource(), key(ns, o.ref.Name)))
	}
}

func key(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

func sameRef(a, b metav1.OwnerReference) bool {
	return a.UID == b.UID && blocks(a) == blocks(b)
}

func blocks(r metav1.OwnerReference) bool {
	return r.BlockOwnerDeletion != nil && *r.BlockOwnerDeletion
}

func hasFinalizer(obj client.Object, f string) bool { return slices.Contains(obj.GetFinalizers(), f) }

// deletingDependents: being deleted in the foreground.
func deletingDependents(obj client.Object) bool {
	return obj.GetDeletionTimestamp() != nil && hasFinalizer(obj, metav1.FinalizerDeleteDependents)
}

func (gc *garbageCollector) sync(ctx context.Context, item string) error {
	if uid, ok := strings.CutPrefix(item, gcOwnerPrefix); ok {
		return gc.checkOwner(types.UID(uid))
	}
	gr, k := parseObjectItem(item)
	info, ok := gc.c.store.ResourceFor(gr)
	if !ok {
		return nil // its kind is no longer served: its objects are gone
	}
	obj, err := gc.get(info, k)
	if err != nil || obj == nil {
		return err
	}
	switch {
	case deletingDependents(obj):
		return gc.finishForeground(ctx, info, obj)
	case obj.GetDeletionTimestamp() != nil && hasFinalizer(obj, metav1.FinalizerOrphanDependents):
		return gc.orphanDependents(ctx, info, obj)
	case obj.GetDeletionTimestamp() != nil:
		return nil // being deleted already
	}
	return gc.attemptToDelete(ctx, info, obj)
}

// get reads an object of the resource by key; nil when there is none.
func (gc *garbageCollector) get(info store.ResourceInfo, k string) (client.Object, error) {
	namespace, name := "", k
	if info.Namespaced {
		namespace, name, _ = strings.Cut(k, "/")
	}
	out, err := gc.c.store.Get(info.GVR, namespace, name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return out.(client.Object), nil
}

// owner reads the owner a reference of a dependent in namespace names. resolved is false when
// the reference cannot be checked (a kind the cluster does not serve, a namespaced owner of a
// cluster-scoped dependent); owner is nil when it does not exist with the referenced UID.
func (gc *garbageCollector) owner(namespace string, r metav1.OwnerReference) (owner client.Object, resolved bool, err error) {
	info, ok := gc.c.store.ResourceForKind(schema.FromAPIVersionAndKind(r.APIVersion, r.Kind))
	if !ok {
		return nil, false, nil
	}
	switch {
	case !info.Namespaced:
		namespace = ""
	case namespace == "":
		return nil, false, nil
	}
	obj, err := gc.get(info, key(namespace, r.Name))
	if err != nil {
		return nil, true, err
	}
	if obj == nil || obj.GetUID() != r.UID {
		return nil, true, nil
	}
	return obj, true, nil
}

// checkOwner checks that an owner dependents reference exists; if not, its dependents are
// attempted.
func (gc *garbageCollector) checkOwner(uid types.UID) error {
	gc.mu.Lock()
	o := gc.owners[uid]
	if o == nil || o.alive || o.gone {
		gc.mu.Unlock()
		return nil
	}
	ref, namespace := o.ref, o.namespace
	gc.mu.Unlock()
	owner, resolved, err := gc.owner(namespace, ref)
	if err != nil {
		return err
	}
	if !resolved {
		gc.mu.Lock()
		if o = gc.owners[uid]; o != nil && !o.gone {
			o.alive = true
		}
		gc.mu.Unlock()
		return nil
	}
	if owner != nil {
		gc.markAlive(uid, owner)
		return nil
	}
	gc.mu.Lock()
	defer gc.mu.Unlock()
	if o = gc.owners[uid]; o == nil || o.gone {
		return nil
	}
	for dep := range o.dependents {
		gc.c.enqueue(gc.idx, objectItem(dep.gr, dep.key))
	}
	return nil
}

// attemptToDelete is upstream's attemptToDeleteItem for an object that is not being deleted.
func (gc *garbageCollector) attemptToDelete(ctx context.Context, info store.ResourceInfo, obj client.Object) error {
	refs := obj.GetOwnerReferences()
	if len(refs) == 0 {
		return nil
	}
	var solid, dangling, waiting []types.UID
	for _, r := range refs {
		owner, resolved, err := gc.owner(obj.GetNamespace(), r)
		switch {
		case err != nil:
			return err
		case !resolved:
			solid = append(solid, r.UID)
		case owner == nil:
			dangling = append(dangling, r.UID)
		case deletingDependents(owner):
			waiting = append(waiting, r.UID)
			gc.markAlive(r.UID, owner)
		default:
			solid = append(solid, r.UID)
			gc.markAlive(r.UID, owner)
		}
	}
	switch {
	case len(solid) > 0:
		if len(dangling) == 0 && len(waiting) == 0 {
			return nil
		}
		// The references to owners that are gone, or that wait for their dependents' deletion,
		// go; the object stays with its other owners.
		return gc.dropOwnerReferences(info, obj, append(dangling, waiting...))
	case len(waiting) > 0 && gc.hasDependents(obj.GetUID()):
		return gc.deleteObject(info, obj, metav1.DeletePropagationForeground)
	}
	policy := metav1.DeletePropagationBackground
	switch {
	case hasFinalizer(obj, metav1.FinalizerOrphanDependents):
		policy = metav1.DeletePropagationOrphan
	case hasFinalizer(obj, metav1.FinalizerDeleteDependents):
		policy = metav1.DeletePropagationForeground
	}
	return gc.deleteObject(info, obj, policy)
}

// markAlive notes that an owner exists, as read from the store; one in foreground deletion has its
// dependents attempted (a restart may have delivered it before them).
func (gc *garbageCollector) markAlive(uid types.UID, owner client.Object) {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	o := gc.owners[uid]
	if o == nil || o.gone {
		return
	}
	o.alive = true
	if deletingDependents(owner) && !o.foreground {
		o.foreground = true
		for dep := range o.dependents {
			gc.c.enqueue(gc.idx, objectItem(dep.gr, dep.key))
		}
	}
}

func (gc *garbageCollector) hasDependents(uid types.UID) bool {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	o := gc.owners[uid]
	return o != nil && len(o.dependents) > 0
}

func (gc *garbageCollector) dependentsOf(uid types.UID) []objKey {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	o := gc.owners[uid]
	if o == nil {
		return nil
	}
	out := make([]objKey, 0, len(o.dependents))
	for dep := range o.dependents {
		out = append(out, dep)
	}
	return out
}

// deleteObject deletes obj as it was read: a changed or replaced object is attempted again.
func (gc *garbageCollector) deleteObject(info store.ResourceInfo, obj client.Object, policy metav1.DeletionPropagation) error {
	uid, rv := obj.GetUID(), obj.GetResourceVersion()
	_, err := gc.c.store.Delete(info.GVR, obj.GetNamespace(), obj.GetName(), store.DeleteOptions{
		Preconditions:     &metav1.Preconditions{UID: &uid, ResourceVersion: &rv},
		PropagationPolicy: &policy,
		SkipSyncWait:      true,
	})
	return err // a conflict is retried with the object as it is then; NotFound: gone
}

// dropOwnerReferences removes the references to the owners from obj.
func (gc *garbageCollector) dropOwnerReferences(info store.ResourceInfo, obj client.Object, uids []types.UID) error {
	next := obj.DeepCopyObject().(client.Object)
	next.SetOwnerReferences(slices.DeleteFunc(next.GetOwnerReferences(), func(r metav1.OwnerReference) bool {
		return slices.Contains(uids, r.UID)
	}))
	_, err := gc.c.store.Update(info.GVR, obj.GetNamespace(), next, store.UpdateOptions{
		FieldManager: "garbage-collector", SkipManagedFields: true, SkipSyncWait: true,
	})
	return err
}

// removeFinalizer takes f off obj (which the registry then removes if nothing else holds it).
func (gc *garbageCollector) removeFinalizer(info store.ResourceInfo, obj client.Object, f string) error {
	next := obj.DeepCopyObject().(client.Object)
	next.SetFinalizers(slices.DeleteFunc(next.GetFinalizers(), func(x string) bool { return x == f }))
	_, err := gc.c.store.Update(info.GVR, obj.GetNamespace(), next, store.UpdateOptions{
		FieldManager: "garbage-collector", SkipManagedFields: true, SkipSyncWait: true,
	})
	return err
}

// finishForeground is upstream's processDeletingDependentsItem: the owner's foregroundDeletion
// finalizer goes once no dependent blocks it; blocking dependents not being deleted yet are
// attempted.
func (gc *garbageCollector) finishForeground(ctx context.Context, info store.ResourceInfo, owner client.Object) error {
	gc.markAlive(owner.GetUID(), owner)
	blocking := false
	for _, dep := range gc.dependentsOf(owner.GetUID()) {
		dinfo, ok := gc.c.store.ResourceFor(dep.gr)
		if !ok {
			continue
		}
		d, err := gc.get(dinfo, dep.key)
		if err != nil {
			return err
		}
		if d == nil {
			continue
		}
		if !slices.ContainsFunc(d.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.UID == owner.GetUID() && blocks(r) }) {
			continue
		}
		blocking = true
		if d.GetDeletionTimestamp() == nil {
			gc.c.enqueue(gc.idx, objectItem(dep.gr, dep.key))
		}
	}
	if blocking {
		return nil // the dependents' removals (or their references going) queue the owner again
	}
	gc.mu.Lock()
	if o := gc.owners[owner.GetUID()]; o != nil {
		o.foreground = false
		if len(o.dependents) == 0 {
			delete(gc.owners, owner.GetUID())
		}
	}
	gc.mu.Unlock()
	return gc.removeFinalizer(info, owner, metav1.FinalizerDeleteDependents)
}

// orphanDependents is upstream's attemptToOrphan: the owner's references go from its
// dependents, then its orphan finalizer.
func (gc *garbageCollector) orphanDependents(ctx context.Context, info store.ResourceInfo, owner client.Object) error {
	for _, dep := range gc.dependentsOf(owner.GetUID()) {
		dinfo, ok := gc.c.store.ResourceFor(dep.gr)
		if !ok {
			continue
		}
		d, err := gc.get(dinfo, dep.key)
		if err != nil {
			return err
		}
		if d == nil || !slices.ContainsFunc(d.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.UID == owner.GetUID() }) {
			continue
		}
		if err := gc.dropOwnerReferences(dinfo, d, []types.UID{owner.GetUID()}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return gc.removeFinalizer(info, owner, metav1.FinalizerOrphanDependents)
}
