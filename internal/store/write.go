package store

import (
	"context"
	"errors"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
)

// maxGenerateNameAttempts bounds retries when a generated name collides, as upstream retries.
const maxGenerateNameAttempts = 8

// Create stores a new object.
func (c *Cluster) Create(gvr schema.GroupVersionResource, namespace string, obj runtime.Object, opts CreateOptions) (_ runtime.Object, err error) {
	b, err := c.lookup(gvr)
	if err != nil {
		return nil, err
	}
	if b.storedAs != nil {
		return c.createView(b, namespace, obj, opts)
	}
	in, err := b.typedCopy(obj)
	if err != nil {
		return nil, err
	}
	if namespace, err = b.requestNamespace(namespace); err != nil {
		return nil, err
	}
	generated, err := b.prepareCreate(namespace, in, opts.FieldManager, opts.SkipManagedFields)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.unlockDurable(&err, opts.SkipSyncWait)
	if c.closed {
		return nil, c.deletedError()
	}
	out, err := c.commitCreateLocked(b, in, generated, opts.DryRun)
	if err != nil {
		return nil, err
	}
	return out.DeepCopyObject(), nil
}

// newObject returns an empty object of the kind with its apiVersion and kind set.
func (b *servedResource) newObject() client.Object {
	if b.custom {
		return newUnstructured(b.info.GVK())
	}
	obj, _ := Scheme().New(b.info.GVK())
	obj.GetObjectKind().SetGroupVersionKind(b.info.GVK())
	return obj.(client.Object)
}

// requestContext carries the request's namespace to k8s.io/apiserver's strategy helpers.
func requestContext(namespace string) context.Context {
	return genericapirequest.WithNamespace(context.Background(), namespace)
}

// createLocked prepares and stores obj, a private copy the store may keep, recording manager's
// fields. Callers hold c.mu (the simulator's own creates).
func (c *Cluster) createLocked(b *servedResource, obj client.Object, dryRun bool, manager string, untracked bool) (client.Object, error) {
	generated, err := b.prepareCreate(obj.GetNamespace(), obj, manager, untracked)
	if err != nil {
		return nil, err
	}
	return c.commitCreateLocked(b, obj, generated, dryRun)
}

// prepareCreate turns obj (a private copy) into the object to store, in kube-apiserver's order:
// defaults (as decoding applies them), then manager's fields (an Update entry, recorded by the
// create handler before the registry runs; with untracked, see CreateOptions.SkipManagedFields,
// an object that brings no managedFields gets none), then beforeCreate. It reads no cluster
// state, so callers run it before taking the lock; generated reports whether the name was
// generated.
func (b *servedResource) prepareCreate(namespace string, obj client.Object, manager string, untracked bool) (generated bool, err error) {
	b.strategy.Default(obj)
	if !untracked || len(obj.GetManagedFields()) > 0 {
		fm, err := fieldManagerFor(b, "")
		if err != nil {
			return false, apierrors.NewInternalError(err)
		}
		obj.SetManagedFields(fm.UpdateNoErrors(b.newObject(), obj, manager).(client.Object).GetManagedFields())
	}
	return b.beforeCreate(namespace, obj)
}

// beforeCreate is the registry's part of a create, as kube-apiserver's generic registry runs it:
// a generated name, uid and creationTimestamp, then the kind's strategy through rest.BeforeCreate
// (namespace, preparation, validation). obj is defaulted, and its managed fields are set.
func (b *servedResource) beforeCreate(namespace string, obj client.Object) (generated bool, err error) {
	obj.GetObjectKind().SetGroupVersionKind(b.info.GVK())
	if obj.GetName() == "" && obj.GetGenerateName() != "" {
		obj.SetName(b.strategy.GenerateName(obj.GetGenerateName()))
		generated = true
	}
	obj.SetUID(uuid.NewUUID())
	obj.SetCreationTimestamp(now())
	obj.SetResourceVersion("")
	obj.SetDeletionTimestamp(nil)
	obj.SetDeletionGracePeriodSeconds(nil)
	obj.SetSelfLink("")
	if err := rest.BeforeCreate(b.strategy, requestContext(namespace), obj); err != nil {
		return false, err
	}
	truncateManagedTimes(obj)
	internObject(obj)
	return generated, nil
}

// trackUpdate returns how a non-apply write by manager records managed fields (see
// UpdateOptions.SkipManagedFields for untracked).
func trackUpdate(b *servedResource, subresource, manager string, untracked bool) managedFieldsFunc {
	return func(live, next client.Object) (client.Object, error) {
		if untracked && len(live.GetManagedFields()) == 0 && len(next.GetManagedFields()) == 0 {
			return next, nil
		}
		fm, err := fieldManagerFor(b, subresource)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		return fm.UpdateNoErrors(live, next, manager).(client.Object), nil
	}
}

// truncateManagedTimes rounds managedFields times to seconds, the precision they have once
// serialized, so a client echoing an object back does not look like a change.
func truncateManagedTimes(obj client.Object) {
	mf := obj.GetManagedFields()
	for i := range mf {
		if mf[i].Time != nil {
			t := metav1.NewTime(mf[i].Time.Truncate(time.Second))
			mf[i].Time = &t
		}
	}
}

// commitCreateLocked stores obj, prepared by prepareCreate (or by server-side apply and
// beforeCreate), after the checks that need the cluster's state: the namespace is open and the
// name free (a generated name that collides is generated again, as upstream retries). Callers
// hold c.mu.
func (c *Cluster) commitCreateLocked(b *servedResource, obj client.Object, generated, dryRun bool) (client.Object, error) {
	gr := b.info.GVR.GroupResource()
	if b.info.Namespaced {
		if err := c.checkNamespaceOpen(obj.GetNamespace()); err != nil {
			return nil, err
		}
	}
	if b.custom {
		if err := c.refuseCreateWhileTerminatingLocked(b); err != nil {
			return nil, err
		}
	}
	for i := 0; c.getLocked(gr, storage.Key(obj.GetNamespace(), obj.GetName())) != nil; i++ {
		if !generated || i == maxGenerateNameAttempts {
			return nil, apierrors.NewAlreadyExists(gr, obj.GetName())
		}
		obj.SetName(b.strategy.GenerateName(obj.GetGenerateName()))
	}
	if svc, ok := obj.(*corev1.Service); ok {
		c.allocateClusterIP(svc)
	}
	if dryRun {
		return obj, nil
	}
	if err := c.admitLocked(obj, nil); err != nil {
		return nil, err
	}
	c.storeLocked(gr, obj, nil)
	return obj, nil
}

// Update replaces an object. An empty resourceVersion is an unconditional update; a stale one is
// a 409 Conflict. Subresource "status" changes only the status; the main resource keeps it.
func (c *Cluster) Update(gvr schema.GroupVersionResource, namespace string, obj runtime.Object, opts UpdateOptions) (runtime.Object, error) {
	b, err := c.lookup(gvr)
	if err != nil {
		return nil, err
	}
	if b.storedAs != nil {
		return c.updateView(b, namespace, obj, opts)
	}
	in, err := b.typedCopy(obj)
	if err != nil {
		return nil, err
	}
	if namespace, err = b.requestNamespace(namespace); err != nil {
		return nil, err
	}
	if err := rest.EnsureObjectNamespaceMatchesRequestNamespace(namespace, in); err != nil {
		return nil, err
	}
	if in.GetName() == "" {
		return nil, apierrors.NewBadRequest("name is required for update")
	}
	if err := b.checkSubresource(opts.Subresource); err != nil {
		return nil, err
	}
	gr := gvr.GroupResource()
	managed := trackUpdate(b, opts.Subresource, opts.FieldManager, opts.SkipManagedFields)
	return c.writeOptimistically(gr, in.GetNamespace(), in.GetName(), opts.SkipSyncWait, func(cur client.Object) (func() (client.Object, error), error) {
		if cur == nil {
			if !b.strategy.AllowCreateOnUpdate() || opts.Subresource != "" || in.GetResourceVersion() != "" {
				return nil, apierrors.NewNotFound(gr, in.GetName())
			}
			obj := in.DeepCopyObject().(client.Object)
			generated, err := b.prepareCreate(namespace, obj, opts.FieldManager, opts.SkipManagedFields)
			if err != nil {
				return nil, err
			}
			if err := opts.ValidateObject.run(obj, nil); err != nil {
				return nil, err
			}
			return func() (client.Object, error) { return c.commitCreateLocked(b, obj, generated, opts.DryRun) }, nil
		}
		prepare := b.prepareUpdate
		if opts.Subresource == "finalize" {
			prepare = func(cur, in client.Object, _ string, _ managedFieldsFunc) (client.Object, bool, error) {
				return prepareFinalize(cur, in)
			}
		}
		next, changed, err := prepare(cur, in.DeepCopyObject().(client.Object), opts.Subresource, managed)
		if err != nil {
			return nil, err
		}
		if err := opts.ValidateObject.run(next, cur); err != nil {
			return nil, err
		}
		return func() (client.Object, error) { return c.commitUpdateLocked(b, cur, next, changed, opts.DryRun) }, nil
	})
}

// run judges a prepared write by f; a nil f allows everything.
func (f ValidateObjectFunc) run(obj, old client.Object) error {
	if f == nil {
		return nil
	}
	return f(obj, old)
}

// maxWriteRetries is how often a write computed outside the lock is computed again because the
// object changed meanwhile, before it answers 409 (kube-apiserver's patch handler allows 5).
const maxWriteRetries = 5

// writeOptimistically runs an update as kube-apiserver's GuaranteedUpdate does: prepare reads
// the current object (nil: absent; stored objects are immutable) and does all the decoding,
// merging, defaulting, validation and managed-fields work outside the cluster lock; the commit
// it returns runs under the lock only if the object is still the one prepare saw, else prepare
// runs again. Readers and other writers of the cluster never wait for a large object's merge.
func (c *Cluster) writeOptimistically(gr schema.GroupResource, namespace, name string, skipSyncWait bool, prepare func(cur client.Object) (func() (client.Object, error), error)) (_ runtime.Object, err error) {
	key := storage.Key(namespace, name)
	for range maxWriteRetries + 1 {
		c.mu.RLock()
		cur := c.getLocked(gr, key)
		c.mu.RUnlock()
		commit, err := prepare(cur)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, c.deletedError()
		}
		if !c.objs.IsCurrent(gr, key, cur) {
			c.mu.Unlock()
			continue
		}
		out, err := commit()
		c.unlockDurable(&err, skipSyncWait)
		if err != nil {
			return nil, err
		}
		return out.DeepCopyObject(), nil
	}
	return nil, conflict(gr, name)
}

func (b *servedResource) checkSubresource(sub string) error {
	switch sub {
	case "":
		return nil
	case "status":
		if b.status != nil {
			return nil
		}
	case "finalize":
		if b.info.GVR == namespacesGVR {
			return nil
		}
	}
	return apierrors.NewNotFound(schema.GroupResource{Group: b.info.GVR.Group, Resource: b.info.GVR.Resource + "/" + sub}, "")
}

func conflict(gr schema.GroupResource, name string) error {
	return apierrors.NewConflict(gr, name, errors.New(registryConflictMessage))
}

const registryConflictMessage = "the object has been modified; please apply your changes to the latest version and try again"

// managedFieldsFunc records managed fields for a change from live to next.
type managedFieldsFunc func(live, next client.Object) (client.Object, error)

// prepareUpdate turns next (a private copy) into the new version of cur by the real API server's
// update rules: the resourceVersion precondition, defaults, the kind's strategy (or its status
// subresource's) through rest.BeforeUpdate, then managed fields. It reports whether the result
// differs from cur, and reads no cluster state but cur.
func (b *servedResource) prepareUpdate(cur, next client.Object, sub string, managed managedFieldsFunc) (client.Object, bool, error) {
	gr := b.info.GVR.GroupResource()
	if rv := next.GetResourceVersion(); rv != "" && rv != cur.GetResourceVersion() {
		return nil, false, conflict(gr, cur.GetName())
	}
	next.SetResourceVersion(cur.GetResourceVersion())
	next.GetObjectKind().SetGroupVersionKind(b.info.GVK())
	// Deletion is the delete verb's: an update can neither start nor undo it.
	next.SetDeletionTimestamp(cur.GetDeletionTimestamp())
	next.SetDeletionGracePeriodSeconds(cur.GetDeletionGracePeriodSeconds())
	next.SetSelfLink("")
	b.strategy.Default(next)
	var strategy rest.RESTUpdateStrategy = b.strategy
	if sub == "status" {
		strategy = b.status
	}
	if err := rest.BeforeUpdate(strategy, requestContext(cur.GetNamespace()), next, cur); err != nil {
		return nil, false, err
	}
	var err error
	if next, err = managed(cur, next); err != nil {
		return nil, false, err
	}
	truncateManagedTimes(next)
	next.SetResourceVersion(cur.GetResourceVersion())
	internObject(next)
	// No-op updates write nothing and send no event, like the real API server.
	return next, !equality.Semantic.DeepEqual(next, cur), nil
}

// commitUpdateLocked stores next, prepared from cur by prepareUpdate, unless it changes nothing.
// Callers hold c.mu and have checked that cur is still the stored version.
func (c *Cluster) commitUpdateLocked(b *servedResource, cur, next client.Object, changed, dryRun bool) (client.Object, error) {
	if !changed {
		return cur, nil
	}
	if dryRun {
		return next, nil
	}
	if next.GetDeletionTimestamp() != nil && !finalizersHold(next) && ptr.Deref(next.GetDeletionGracePeriodSeconds(), 0) == 0 {
		// The last finalizer of a deleting object is gone: it is removed now (a terminating pod
		// still waits for its kubelet), as upstream's ShouldDeleteDuringUpdate.
		c.eraseLocked(b.info.GVR.GroupResource(), cur, next)
		return next, nil
	}
	if err := c.admitLocked(next, cur); err != nil {
		return nil, err
	}
	c.storeLocked(b.info.GVR.GroupResource(), next, cur)
	return next, nil
}

// Delete deletes an object: it is removed at once unless finalizers hold it, in which case it gets
// a deletionTimestamp, or it is a pod on a node, which terminates gracefully (see kubelet.go).
// Dependents are garbage collected per the propagation policy.
func (c *Cluster) Delete(gvr schema.GroupVersionResource, namespace, name string, opts DeleteOptions) (_ runtime.Object, err error) {
	b, err := c.lookup(gvr)
	if err != nil {
		return nil, err
	}
	if b.storedAs != nil {
		return c.deleteView(b, namespace, name, opts)
	}
	if namespace, err = b.requestNamespace(namespace); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.unlockDurable(&err, opts.SkipSyncWait)
	if c.closed {
		return nil, c.deletedError()
	}
	cur := c.getLocked(gvr.GroupResource(), storage.Key(namespace, name))
	if cur == nil {
		return nil, apierrors.NewNotFound(gvr.GroupResource(), name)
	}
	out, err := c.deleteRequestedLocked(b, cur, opts)
	if err != nil {
		return nil, err
	}
	return out.DeepCopyObject(), nil
}

// deleteRequestedLocked is a client's delete of cur: namespaces the API server keeps are refused,
// a dry run changes nothing.
func (c *Cluster) deleteRequestedLocked(b *servedResource, cur client.Object, opts DeleteOptions) (client.Object, error) {
	gr := b.info.GVR.GroupResource()
	if gr == namespacesGVR.GroupResource() && immortalNamespaces[cur.GetName()] {
		return nil, apierrors.NewForbidden(gr, cur.GetName(), errors.New("this namespace may not be deleted"))
	}
	options := &metav1.DeleteOptions{
		GracePeriodSeconds: opts.GracePeriodSeconds,
		Preconditions:      opts.Preconditions,
		PropagationPolicy:  opts.PropagationPolicy,
	}
	if opts.DryRun {
		options.DryRun = []string{metav1.DryRunAll}
		return dryRunDelete(b, cur, options)
	}
	return c.deleteLocked(b, cur, options)
}

// dryRunDelete returns what a delete of cur would leave, changing nothing.
func dryRunDelete(b *servedResource, cur client.Object, options *metav1.DeleteOptions) (client.Object, error) {
	next := cur.DeepCopyObject().(client.Object)
	graceful, pending, err := rest.BeforeDelete(b.strategy, context.Background(), next, options)
	switch {
	case err != nil:
		return nil, err
	case pending || graceful || cur.GetDeletionTimestamp() != nil:
		return next, nil
	case b.info.GVR == namespacesGVR:
		return terminating(cur), nil // what a real delete would answer, the content still there
	case len(cur.GetFinalizers()) > 0:
		return markDeleting(cur), nil
	}
	return next, nil
}

// controllerDeleteLocked is the registry's own delete of cur (a CRD's objects when the CRD goes):
// no preconditions, so it cannot fail.
func (c *Cluster) controllerDeleteLocked(b *servedResource, cur client.Object, policy metav1.DeletionPropagation, gracePeriod *int64) client.Object {
	out, err := c.deleteLocked(b, cur, &metav1.DeleteOptions{PropagationPolicy: &policy, GracePeriodSeconds: gracePeriod})
	if err != nil {
		return cur
	}
	return out
}

// deleteLocked starts or completes the deletion of cur as kube-apiserver's registry does, and
// returns its resulting state: namespaces and CRDs by their own REST, everything else by the
// generic registry's delete (deleteObjectLocked).
func (c *Cluster) deleteLocked(b *servedResource, cur client.Object, options *metav1.DeleteOptions) (client.Object, error) {
	switch gr := b.info.GVR.GroupResource(); {
	case b.info.GVR == namespacesGVR:
		return c.deleteNamespaceLocked(b, cur, options)
	case gr == crdsGR && cur.GetDeletionTimestamp() == nil:
		return c.deleteCustomResourceDefinitionLocked(cur), nil
	}
	return c.deleteObjectLocked(b, cur, options)
}

// deleteObjectLocked is the generic registry's delete, as k8s.io/apiserver's Store.Delete:
// rest.BeforeDelete checks the options and the preconditions and decides graceful deletion with
// the kind's strategy (a pod on a node stays, terminating, until its kubelet has stopped it, and
// a second delete may only shorten its grace period); the propagation policy sets the orphan or
// foregroundDeletion finalizer, which the garbage collector (package simulate) acts on and
// removes; finalizers hold an object with a deletionTimestamp; without them it is removed, and
// the garbage collector deletes its dependents in the background.
func (c *Cluster) deleteObjectLocked(b *servedResource, cur client.Object, options *metav1.DeleteOptions) (client.Object, error) {
	gr := b.info.GVR.GroupResource()
	next := cur.DeepCopyObject().(client.Object)
	graceful, pending, err := rest.BeforeDelete(b.strategy, context.Background(), next, options)
	if err != nil {
		return nil, err
	}
	if pending {
		return cur, nil // graceful deletion already under way
	}
	if graceful {
		t := next.GetDeletionTimestamp().Rfc3339Copy() // the precision it has once serialized
		next.SetDeletionTimestamp(&t)
	}
	if update, finalizers := b.gcFinalizers(next, options); update {
		next.SetFinalizers(finalizers)
	}
	switch {
	case graceful && (ptr.Deref(next.GetDeletionGracePeriodSeconds(), 0) > 0 || len(next.GetFinalizers()) > 0):
		c.storeLocked(gr, next, cur) // its kubelet stops it (package simulate), or finalizers hold it
		return next, nil
	case !graceful && len(next.GetFinalizers()) > 0:
		next = markDeleting(next)
		if equality.Semantic.DeepEqual(next, cur) {
			return cur, nil // deleted again: nothing changes
		}
		c.storeLocked(gr, next, cur)
		return next, nil
	}
	c.eraseLocked(gr, cur, next)
	return next, nil
}

// gcFinalizers is the registry's deletionFinalizersForGarbageCollection: the orphan and
// foregroundDeletion finalizers obj gets from the options' propagation policy (or keeps, without
// one), unless the kind's strategy does not support garbage collection. It reports whether they
// change.
func (b *servedResource) gcFinalizers(obj client.Object, options *metav1.DeleteOptions) (bool, []string) {
	policy := rest.DeleteDependents
	if s, ok := b.strategy.(rest.GarbageCollectionDeleteStrategy); ok {
		policy = s.DefaultGarbageCollectionPolicy(context.Background())
	}
	if policy == rest.Unsupported {
		return false, obj.GetFinalizers()
	}
	orphan, foreground := policy == rest.OrphanDependents, false
	for _, f := range obj.GetFinalizers() {
		if f == metav1.FinalizerOrphanDependents {
			orphan, foreground = true, false
			break
		}
		if f == metav1.FinalizerDeleteDependents {
			orphan, foreground = false, true
			break
		}
	}
	//lint:ignore SA1019 kube-apiserver still honours the deprecated orphanDependents, before propagationPolicy
	orphanDependents := options.OrphanDependents
	switch {
	case orphanDependents != nil:
		orphan, foreground = *orphanDependents, false
	case options.PropagationPolicy != nil:
		orphan = *options.PropagationPolicy == metav1.DeletePropagationOrphan
		foreground = *options.PropagationPolicy == metav1.DeletePropagationForeground
	}
	out := slices.DeleteFunc(slices.Clone(obj.GetFinalizers()), func(f string) bool {
		return f == metav1.FinalizerOrphanDependents || f == metav1.FinalizerDeleteDependents
	})
	if orphan {
		out = append(out, metav1.FinalizerOrphanDependents)
	}
	if foreground {
		out = append(out, metav1.FinalizerDeleteDependents)
	}
	if sets.New(out...).Equal(sets.New(obj.GetFinalizers()...)) {
		return false, obj.GetFinalizers()
	}
	return true, out
}

// markDeleting returns a copy of cur held by finalizers, as upstream's markAsDeleting: a
// deletionTimestamp of now (an earlier one stays), grace period 0, and the generation bumped for
// kinds that have one when the deletion starts.
func markDeleting(cur client.Object) client.Object {
	next := cur.DeepCopyObject().(client.Object)
	if next.GetDeletionTimestamp() == nil && next.GetGeneration() > 0 {
		next.SetGeneration(next.GetGeneration() + 1)
	}
	if t := now(); next.GetDeletionTimestamp() == nil || next.GetDeletionTimestamp().After(t.Time) {
		next.SetDeletionTimestamp(&t)
	}
	var zero int64
	next.SetDeletionGracePeriodSeconds(&zero)
	return next
}

// DeleteCollection deletes all matching objects and returns them as a list.
func (c *Cluster) DeleteCollection(gvr schema.GroupVersionResource, namespace string, listOpts ListOptions, opts DeleteOptions) (_ runtime.Object, err error) {
	b, err := c.lookup(gvr)
	if err != nil {
		return nil, err
	}
	if b.storedAs != nil {
		return c.deleteCollectionView(b, namespace, listOpts, opts)
	}
	if !b.info.Namespaced {
		namespace = ""
	}
	sel, err := b.selectors(listOpts)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.unlockDurable(&err, opts.SkipSyncWait)
	if c.closed {
		return nil, c.deletedError()
	}
	m := c.objs.Resource(gvr.GroupResource())
	var out []client.Object
	for _, key := range storage.Keys(m, namespace) {
		cur := c.getLocked(gvr.GroupResource(), key) // m changes as objects go
		if cur == nil || !sel.matches(b, cur) {
			continue
		}
		res, err := c.deleteRequestedLocked(b, cur, opts)
		if err != nil {
			if apierrors.IsForbidden(err) {
				continue // e.g. immortal namespaces
			}
			return nil, err
		}
		out = append(out, res)
	}
	return b.buildList(out, formatRV(c.objs.ResourceVersion()), "", nil, true), nil
}
