package store

import (
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The namespace REST's part, and NamespaceLifecycle admission: a terminating namespace refuses
// new content. Its content is deleted, and its kubernetes finalizer removed once it is empty, by
// the namespace controller (package simulate).

// immortalNamespaces cannot be deleted, as the real NamespaceLifecycle admission enforces.
var immortalNamespaces = map[string]bool{metav1.NamespaceDefault: true, metav1.NamespaceSystem: true, metav1.NamespacePublic: true}

// checkNamespaceOpen refuses content in a missing or terminating namespace.
func (c *Cluster) checkNamespaceOpen(namespace string) error {
	ns := c.getLocked(namespacesGVR.GroupResource(), namespace)
	if ns == nil {
		return apierrors.NewNotFound(namespacesGVR.GroupResource(), namespace)
	}
	if ns.GetDeletionTimestamp() != nil || ns.(*corev1.Namespace).Status.Phase == corev1.NamespaceTerminating {
		err := apierrors.NewForbidden(namespacesGVR.GroupResource(), namespace,
			fmt.Errorf("unable to create new content in namespace %s because it is being terminated", namespace))
		err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
			Type:    corev1.NamespaceTerminatingCause,
			Message: fmt.Sprintf("namespace %s is being terminated", namespace),
			Field:   "metadata.namespace",
		})
		return err
	}
	return nil
}

// deleteNamespaceLocked is upstream's namespace REST delete: the first delete marks the namespace
// Terminating (deletionTimestamp now, status.phase Terminating) and sets its orphan and
// foregroundDeletion finalizers as the propagation policy asks; while spec.finalizers is not
// empty (the namespace controller, package simulate, empties the namespace and then removes its
// kubernetes finalizer through namespaces/finalize, which removes the namespace) it stays, and a
// delete of a Terminating namespace answers 409. Without spec.finalizers it is deleted as any
// object. Callers hold c.mu.
func (c *Cluster) deleteNamespaceLocked(b *servedResource, cur client.Object, options *metav1.DeleteOptions) (client.Object, error) {
	gr := b.info.GVR.GroupResource()
	if cur.GetDeletionTimestamp() == nil {
		next := terminating(cur)
		orphan := hasFinalizer(cur, metav1.FinalizerOrphanDependents)
		foreground := hasFinalizer(cur, metav1.FinalizerDeleteDependents)
		if p := options.PropagationPolicy; p != nil {
			orphan, foreground = *p == metav1.DeletePropagationOrphan, *p == metav1.DeletePropagationForeground
		}
		fins := slices.DeleteFunc(slices.Clone(next.Finalizers), func(f string) bool {
			return f == metav1.FinalizerOrphanDependents || f == metav1.FinalizerDeleteDependents
		})
		if orphan {
			fins = append(fins, metav1.FinalizerOrphanDependents)
		}
		if foreground {
			fins = append(fins, metav1.FinalizerDeleteDependents)
		}
		next.Finalizers = fins
		c.storeLocked(gr, next, cur)
		if len(next.Spec.Finalizers) > 0 {
			return next, nil
		}
		cur = next
	}
	if len(cur.(*corev1.Namespace).Spec.Finalizers) > 0 {
		//lint:ignore ST1005 upstream's message, verbatim
		return nil, apierrors.NewConflict(gr, cur.GetName(), errors.New("The system is ensuring all content is removed from this namespace.  Upon completion, this namespace will automatically be purged by the system."))
	}
	return c.deleteObjectLocked(b, cur, options)
}

// terminating is what a namespace's delete makes of it, as upstream's namespace REST does:
// deletionTimestamp now, phase Terminating.
func terminating(cur client.Object) *corev1.Namespace {
	next := cur.DeepCopyObject().(*corev1.Namespace)
	t := now()
	next.SetDeletionTimestamp(&t)
	next.Status.Phase = corev1.NamespaceTerminating
	return next
}

// prepareFinalize is namespaces/finalize, as upstream's finalize REST: only spec.finalizers
// change (the namespace controller removes its kubernetes finalizer there), each a qualified name.
func prepareFinalize(cur, in client.Object) (client.Object, bool, error) {
	ns, ok := in.(*corev1.Namespace)
	if !ok {
		return nil, false, apierrors.NewBadRequest("not a Namespace")
	}
	if rv := ns.ResourceVersion; rv != "" && rv != cur.GetResourceVersion() {
		return nil, false, conflict(namespacesGVR.GroupResource(), cur.GetName())
	}
	var errs field.ErrorList
	for i, f := range ns.Spec.Finalizers {
		errs = append(errs, apivalidation.ValidateFinalizerName(string(f), field.NewPath("spec", "finalizers").Index(i))...)
	}
	if len(errs) > 0 {
		return nil, false, apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("Namespace").GroupKind(), cur.GetName(), errs)
	}
	next := cur.DeepCopyObject().(*corev1.Namespace)
	next.Spec.Finalizers = slices.Clone(ns.Spec.Finalizers)
	return next, !equality.Semantic.DeepEqual(next, cur), nil
}

// finalizersHold reports whether finalizers keep a deleting object: its own, and a namespace's
// spec.finalizers.
func finalizersHold(obj client.Object) bool {
	if len(obj.GetFinalizers()) > 0 {
		return true
	}
	ns, ok := obj.(*corev1.Namespace)
	return ok && len(ns.Spec.Finalizers) > 0
}

func hasFinalizer(obj client.Object, f string) bool { return slices.Contains(obj.GetFinalizers(), f) }
