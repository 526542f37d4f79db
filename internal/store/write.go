package store

import (
	"errors"
	"fmt"
	"reflect"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// maxGenerateNameAttempts bounds retries when a generated name collides, as upstream retries.
const maxGenerateNameAttempts = 8

// maxGeneratedNameLength leaves room for the 5 random characters in a 63-character name.
const maxGeneratedNameLength = 63 - 5

// Create stores a new object.
func (c *Cluster) Create(gvr schema.GroupVersionResource, namespace string, obj runtime.Object, opts CreateOptions) (_ runtime.Object, err error) {
	b, err := lookup(gvr)
	if err != nil {
		return nil, err
	}
	in, err := b.typedCopy(obj)
	if err != nil {
		return nil, err
	}
	if err := b.bindNamespace(in, namespace); err != nil {
		return nil, err
	}
	if in, err = b.prepareCreate(in, opts.FieldManager, opts.SkipManagedFields); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.unlockDurable(&err, opts.SkipSyncWait)
	out, err := c.createAppliedLocked(b, in, opts.DryRun)
	if err != nil {
		return nil, err
	}
	return out.DeepCopyObject(), nil
}

// bindNamespace checks the object's namespace against the request's and fills it in.
func (b *kindBehavior) bindNamespace(obj client.Object, namespace string) error {
	ns, err := b.requestNamespace(namespace)
	if err != nil {
		return err
	}
	if !b.info.Namespaced {
		obj.SetNamespace("")
		return nil
	}
	if obj.GetNamespace() != "" && obj.GetNamespace() != ns {
		return apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	obj.SetNamespace(ns)
	return nil
}

// newObject returns an empty object of the kind with its apiVersion and kind set.
func (b *kindBehavior) newObject() client.Object {
	obj, _ := Scheme().New(b.info.GVK())
	obj.GetObjectKind().SetGroupVersionKind(b.info.GVK())
	return obj.(client.Object)
}

func invalid(b *kindBehavior, name string, errs field.ErrorList) error {
	return apierrors.NewInvalid(b.info.GVK().GroupKind(), name, errs)
}

// createLocked records manager's fields and stores obj, a private copy the store may keep.
// Callers hold c.mu.
func (c *Cluster) createLocked(b *kindBehavior, obj client.Object, dryRun bool, manager string, untracked bool) (client.Object, error) {
	obj, err := b.prepareCreate(obj, manager, untracked)
	if err != nil {
		return nil, err
	}
	return c.createAppliedLocked(b, obj, dryRun)
}

// prepareCreate records manager's fields on a new object (an Update entry, as for any create).
// With untracked (see CreateOptions.SkipManagedFields) an object that brings no managedFields
// gets none. It reads no cluster state, so callers run it before taking the lock.
func (b *kindBehavior) prepareCreate(obj client.Object, manager string, untracked bool) (client.Object, error) {
	if untracked && len(obj.GetManagedFields()) == 0 {
		return obj, nil // createAppliedLocked normalizes
	}
	fm, err := fieldManagerFor(b, "")
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	normalize(obj) // defaults are applied before managed fields are computed, as on decode upstream
	return fm.UpdateNoErrors(b.newObject(), obj, manager).(client.Object), nil
}

// trackUpdate returns how a non-apply write by manager records managed fields (see
// UpdateOptions.SkipManagedFields for untracked).
func trackUpdate(b *kindBehavior, subresource, manager string, untracked bool) managedFieldsFunc {
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

// createAppliedLocked validates and stores obj whose managed fields are already set (by
// createLocked or by server-side apply). Callers hold c.mu.
func (c *Cluster) createAppliedLocked(b *kindBehavior, obj client.Object, dryRun bool) (client.Object, error) {
	gr := b.info.GVR.GroupResource()
	obj.GetObjectKind().SetGroupVersionKind(b.info.GVK())
	truncateManagedTimes(obj)
	if obj.GetName() == "" && obj.GetGenerateName() != "" {
		base := obj.GetGenerateName()
		if len(base) > maxGeneratedNameLength {
			base = base[:maxGeneratedNameLength]
		}
		for i := 0; i < maxGenerateNameAttempts; i++ {
			obj.SetName(base + rand.String(5))
			if c.getLocked(gr, objectKey(obj.GetNamespace(), obj.GetName())) == nil {
				break
			}
		}
	}
	errs := validation.ValidateObjectMetaAccessor(obj, b.info.Namespaced, b.nameFn, field.NewPath("metadata"))
	if errs = append(errs, validateKind(obj)...); len(errs) > 0 {
		return nil, invalid(b, obj.GetName(), errs)
	}
	if b.info.Namespaced {
		if err := c.checkNamespaceOpen(obj.GetNamespace()); err != nil {
			return nil, err
		}
	}
	if c.getLocked(gr, objectKey(obj.GetNamespace(), obj.GetName())) != nil {
		return nil, apierrors.NewAlreadyExists(gr, obj.GetName())
	}

	obj.SetUID(uuid.NewUUID())
	obj.SetCreationTimestamp(now())
	obj.SetResourceVersion("")
	obj.SetDeletionTimestamp(nil)
	obj.SetDeletionGracePeriodSeconds(nil)
	obj.SetSelfLink("")
	obj.SetGeneration(0)
	if b.hasGeneration {
		obj.SetGeneration(1)
	}
	normalize(obj)
	if b.hasStatus {
		prepareStatusForCreate(obj)
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
	c.putLocked(gr, obj, nil)
	return obj, nil
}

// prepareStatusForCreate does what the real registry strategies do to the status on create: it
// is dropped (clients write it through the status subresource afterwards), except that Nodes keep
// theirs (kubelet registers with status) and a few kinds start in their initial phase.
func prepareStatusForCreate(obj client.Object) {
	switch o := obj.(type) {
	case *corev1.Node:
		return
	case *corev1.Namespace:
		o.Spec.Finalizers = []corev1.FinalizerName{corev1.FinalizerKubernetes}
		o.Status = corev1.NamespaceStatus{Phase: corev1.NamespaceActive}
		if o.Labels == nil {
			o.Labels = map[string]string{}
		}
		o.Labels[corev1.LabelMetadataName] = o.Name
		return
	}
	v := reflect.ValueOf(obj).Elem().FieldByName("Status")
	v.Set(reflect.Zero(v.Type()))
	switch o := obj.(type) {
	case *corev1.Pod:
		o.Status.Phase = corev1.PodPending
	case *corev1.PersistentVolume:
		o.Status.Phase = corev1.VolumePending
	case *apiextensionsv1.CustomResourceDefinition:
		for _, v := range o.Spec.Versions {
			if v.Storage {
				o.Status.StoredVersions = []string{v.Name}
			}
		}
	}
}

// normalize applies the conversions the real API server does on every write.
func normalize(obj client.Object) {
	Scheme().Default(obj)
	if s, ok := obj.(*corev1.Secret); ok && len(s.StringData) > 0 {
		// stringData is write-only: it is merged into data.
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		for k, v := range s.StringData {
			s.Data[k] = []byte(v)
		}
		s.StringData = nil
	}
}

// Update replaces an object. An empty resourceVersion is an unconditional update; a stale one is
// a 409 Conflict. Subresource "status" changes only the status; the main resource keeps it.
func (c *Cluster) Update(gvr schema.GroupVersionResource, namespace string, obj runtime.Object, opts UpdateOptions) (runtime.Object, error) {
	b, err := lookup(gvr)
	if err != nil {
		return nil, err
	}
	in, err := b.typedCopy(obj)
	if err != nil {
		return nil, err
	}
	if err := b.bindNamespace(in, namespace); err != nil {
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
			if !b.allowCreateOnUpdate || opts.Subresource != "" || in.GetResourceVersion() != "" {
				return nil, apierrors.NewNotFound(gr, in.GetName())
			}
			obj, err := b.prepareCreate(in.DeepCopyObject().(client.Object), opts.FieldManager, opts.SkipManagedFields)
			if err != nil {
				return nil, err
			}
			return func() (client.Object, error) { return c.createAppliedLocked(b, obj, opts.DryRun) }, nil
		}
		next, changed, err := b.prepareUpdate(cur, in.DeepCopyObject().(client.Object), opts.Subresource, managed)
		if err != nil {
			return nil, err
		}
		return func() (client.Object, error) { return c.commitUpdateLocked(b, cur, next, changed, opts.DryRun) }, nil
	})
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
	key := objectKey(namespace, name)
	for range maxWriteRetries + 1 {
		c.mu.RLock()
		cur := c.getLocked(gr, key)
		c.mu.RUnlock()
		commit, err := prepare(cur)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		if c.getLocked(gr, key) != cur {
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

func (b *kindBehavior) checkSubresource(sub string) error {
	switch sub {
	case "":
		return nil
	case "status":
		if b.hasStatus {
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
// update rules, and reports whether it differs from cur. It reads no cluster state but cur.
func (b *kindBehavior) prepareUpdate(cur, next client.Object, sub string, managed managedFieldsFunc) (client.Object, bool, error) {
	gr := b.info.GVR.GroupResource()
	if rv := next.GetResourceVersion(); rv != "" && rv != cur.GetResourceVersion() {
		return nil, false, conflict(gr, cur.GetName())
	}
	next.SetResourceVersion(cur.GetResourceVersion())
	next.GetObjectKind().SetGroupVersionKind(b.info.GVK())
	switch sub {
	case "":
		if b.hasStatus {
			copyStatus(next, cur)
		}
		if ns, ok := next.(*corev1.Namespace); ok {
			// spec.finalizers only change through /finalize, which the store drives itself.
			ns.Spec.Finalizers = cur.(*corev1.Namespace).Spec.Finalizers
		}
	case "status":
		copyAllButStatus(next, cur)
		metav1.ResetObjectMetaForStatus(next, cur)
	}
	if next.GetUID() == "" {
		next.SetUID(cur.GetUID())
	}
	if ts := next.GetCreationTimestamp(); ts.IsZero() {
		next.SetCreationTimestamp(cur.GetCreationTimestamp())
	}
	next.SetDeletionTimestamp(cur.GetDeletionTimestamp())
	next.SetDeletionGracePeriodSeconds(cur.GetDeletionGracePeriodSeconds())
	next.SetSelfLink("")
	normalize(next)
	if svc, ok := next.(*corev1.Service); ok {
		keepAllocatedIPs(svc, cur.(*corev1.Service))
	}
	next.SetGeneration(cur.GetGeneration())
	if b.hasGeneration && sub == "" && !specEqual(next, cur) {
		next.SetGeneration(cur.GetGeneration() + 1)
	}

	errs := validation.ValidateObjectMetaAccessor(next, b.info.Namespaced, b.nameFn, field.NewPath("metadata"))
	errs = append(errs, validation.ValidateObjectMetaAccessorUpdate(next, cur, field.NewPath("metadata"))...)
	errs = append(errs, validateKind(next)...)
	if len(errs) > 0 {
		return nil, false, invalid(b, next.GetName(), errs)
	}
	var err error
	if next, err = managed(cur, next); err != nil {
		return nil, false, err
	}
	truncateManagedTimes(next)
	next.SetResourceVersion(cur.GetResourceVersion())
	// No-op updates write nothing and send no event, like the real API server.
	return next, !equality.Semantic.DeepEqual(next, cur), nil
}

// commitUpdateLocked stores next, prepared from cur by prepareUpdate, unless it changes nothing.
// Callers hold c.mu and have checked that cur is still the stored version.
func (c *Cluster) commitUpdateLocked(b *kindBehavior, cur, next client.Object, changed, dryRun bool) (client.Object, error) {
	if !changed {
		return cur, nil
	}
	if dryRun {
		return next, nil
	}
	if next.GetDeletionTimestamp() != nil && len(next.GetFinalizers()) == 0 && ptr.Deref(next.GetDeletionGracePeriodSeconds(), 0) == 0 {
		// The last finalizer of a deleting object is gone: it is removed now (a terminating pod
		// still waits for its kubelet).
		return c.removeLocked(b, cur, next), nil
	}
	if err := c.admitLocked(next, cur); err != nil {
		return nil, err
	}
	c.putLocked(b.info.GVR.GroupResource(), next, cur)
	c.afterOwnersChanged(next.GetNamespace(), cur.GetOwnerReferences(), next.GetOwnerReferences())
	return next, nil
}

// Delete deletes an object: it is removed at once unless finalizers hold it, in which case it gets
// a deletionTimestamp, or it is a pod on a node, which terminates gracefully (see graceful.go).
// Dependents are garbage collected per the propagation policy.
func (c *Cluster) Delete(gvr schema.GroupVersionResource, namespace, name string, opts DeleteOptions) (_ runtime.Object, err error) {
	b, err := lookup(gvr)
	if err != nil {
		return nil, err
	}
	if namespace, err = b.requestNamespace(namespace); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.unlockDurable(&err, opts.SkipSyncWait)
	cur := c.getLocked(gvr.GroupResource(), objectKey(namespace, name))
	if cur == nil {
		return nil, apierrors.NewNotFound(gvr.GroupResource(), name)
	}
	out, err := c.deleteChecked(b, cur, opts)
	if err != nil {
		return nil, err
	}
	return out.DeepCopyObject(), nil
}

func (c *Cluster) deleteChecked(b *kindBehavior, cur client.Object, opts DeleteOptions) (client.Object, error) {
	gr := b.info.GVR.GroupResource()
	if p := opts.Preconditions; p != nil {
		if p.UID != nil && *p.UID != cur.GetUID() {
			//lint:ignore ST1005 upstream's message, which clients match
			return nil, apierrors.NewConflict(gr, cur.GetName(), fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, cur.GetUID()))
		}
		if p.ResourceVersion != nil && *p.ResourceVersion != cur.GetResourceVersion() {
			//lint:ignore ST1005 upstream's message, which clients match
			return nil, apierrors.NewConflict(gr, cur.GetName(), fmt.Errorf("Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p.ResourceVersion, cur.GetResourceVersion()))
		}
	}
	if gr == namespacesGVR.GroupResource() && immortalNamespaces[cur.GetName()] {
		return nil, apierrors.NewForbidden(gr, cur.GetName(), errors.New("this namespace may not be deleted"))
	}
	if opts.DryRun {
		out := cur.DeepCopyObject().(client.Object)
		if out.GetDeletionTimestamp() == nil {
			if period, ok := gracePeriod(b, cur, opts.GracePeriodSeconds); ok && period > 0 {
				out = markDeleting(cur, period)
			} else if len(out.GetFinalizers()) > 0 {
				t := now()
				out.SetDeletionTimestamp(&t)
			}
		}
		return out, nil
	}
	policy := metav1.DeletePropagationBackground
	if opts.PropagationPolicy != nil {
		policy = *opts.PropagationPolicy
		switch policy {
		case metav1.DeletePropagationBackground, metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan:
		default:
			return nil, invalid(b, cur.GetName(), field.ErrorList{field.NotSupported(field.NewPath("propagationPolicy"), policy,
				[]string{string(metav1.DeletePropagationForeground), string(metav1.DeletePropagationBackground), string(metav1.DeletePropagationOrphan)})})
		}
	}
	return c.deleteLocked(b, cur, policy, opts.GracePeriodSeconds), nil
}

// deleteLocked starts or completes the deletion of cur and returns its resulting state.
// requestedGrace is the caller's gracePeriodSeconds (nil: the kind's default).
func (c *Cluster) deleteLocked(b *kindBehavior, cur client.Object, policy metav1.DeletionPropagation, requestedGrace *int64) client.Object {
	if cur.GetDeletionTimestamp() != nil {
		// Already being deleted: finalizers decide when it goes, and a pod's grace period may
		// only get shorter.
		return c.shortenGracePeriodLocked(b, cur, requestedGrace)
	}
	if b.info.GVR == namespacesGVR {
		return c.deleteNamespaceLocked(b, cur)
	}
	switch policy {
	case metav1.DeletePropagationOrphan:
		c.orphanDependents(cur)
	case metav1.DeletePropagationForeground:
		if len(c.deps[cur.GetUID()]) > 0 {
			// The owner stays, marked, until its blocking dependents are gone.
			next := markDeleting(cur, 0)
			next.SetFinalizers(append(next.GetFinalizers(), metav1.FinalizerDeleteDependents))
			c.putLocked(b.info.GVR.GroupResource(), next, cur)
			for ref := range c.deps[cur.GetUID()] {
				if dep := c.getLocked(ref.gr, ref.key); dep != nil {
					db, _ := behaviorForGR(ref.gr)
					c.deleteLocked(db, dep, metav1.DeletePropagationForeground, nil)
				}
			}
			c.finishForeground(b, next.GetNamespace(), next.GetName())
			if out := c.getLocked(b.info.GVR.GroupResource(), objectKey(next.GetNamespace(), next.GetName())); out != nil {
				return out
			}
			return next
		}
	}
	if period, ok := gracePeriod(b, cur, requestedGrace); ok && period > 0 {
		// A pod on a node stays, terminating, until its kubelet has stopped it.
		next := markDeleting(cur, period)
		c.putLocked(b.info.GVR.GroupResource(), next, cur)
		c.scheduleKubeletStop(next, period)
		return next
	}
	if len(cur.GetFinalizers()) > 0 {
		next := markDeleting(cur, 0)
		c.putLocked(b.info.GVR.GroupResource(), next, cur)
		return next
	}
	return c.removeLocked(b, cur, cur.DeepCopyObject().(client.Object))
}

// markDeleting returns a copy of cur being deleted with a grace period of period seconds:
// deletionTimestamp is now + period (just now for finalizer-held objects, period 0); kinds with a
// generation get it bumped, as upstream does.
func markDeleting(cur client.Object, period int64) client.Object {
	next := cur.DeepCopyObject().(client.Object)
	t := metav1.NewTime(time.Now().Add(time.Duration(period) * time.Second).Truncate(time.Second))
	next.SetDeletionTimestamp(&t)
	next.SetDeletionGracePeriodSeconds(&period)
	if next.GetGeneration() > 0 {
		next.SetGeneration(next.GetGeneration() + 1)
	}
	return next
}

// removeLocked removes cur from the store (last is its final state, a private copy) and then
// runs what the garbage collector, namespace controller and pod garbage collector would do in
// response.
func (c *Cluster) removeLocked(b *kindBehavior, cur, last client.Object) client.Object {
	gr := b.info.GVR.GroupResource()
	c.dropLocked(gr, cur, last)
	c.collectDependents(cur)
	if b.info.Namespaced {
		c.finishNamespace(cur.GetNamespace())
	}
	if gr == nodesGR {
		c.collectPodsOfNode(cur.GetName())
	}
	c.afterOwnersChanged(cur.GetNamespace(), cur.GetOwnerReferences(), nil)
	return last
}

func behaviorForGR(gr schema.GroupResource) (*kindBehavior, bool) {
	b, ok := shared().byGR[gr]
	return b, ok
}

// DeleteCollection deletes all matching objects and returns them as a list.
func (c *Cluster) DeleteCollection(gvr schema.GroupVersionResource, namespace string, listOpts ListOptions, opts DeleteOptions) (_ runtime.Object, err error) {
	b, err := lookup(gvr)
	if err != nil {
		return nil, err
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
	m := c.objects[gvr.GroupResource()]
	var out []client.Object
	for _, key := range namespacedKeys(m, namespace) {
		cur := m[key]
		if cur == nil || !sel.matches(b, cur) {
			continue
		}
		res, err := c.deleteChecked(b, cur, opts)
		if err != nil {
			if apierrors.IsForbidden(err) {
				continue // e.g. immortal namespaces
			}
			return nil, err
		}
		out = append(out, res)
	}
	return b.buildList(out, formatRV(c.rv), "", nil, true), nil
}
