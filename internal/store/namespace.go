package store

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
)

// The namespace controller's part, and NamespaceLifecycle admission: a terminating namespace
// refuses new content, its content is deleted, and it is removed once empty.

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

// deleteNamespaceLocked marks the namespace Terminating, deletes its content and finishes the
// namespace once the content is gone, as the namespace controller does.
func (c *Cluster) deleteNamespaceLocked(b *servedResource, cur client.Object) client.Object {
	next := terminating(cur)
	c.storeLocked(b.info.GVR.GroupResource(), next, cur)
	for gr, m := range c.objs.All() {
		db, ok := c.resourceForGR(gr)
		if !ok || !db.info.Namespaced {
			continue
		}
		for _, key := range storage.Keys(m, next.Name) {
			if obj := c.getLocked(gr, key); obj != nil {
				c.controllerDeleteLocked(db, obj, metav1.DeletePropagationBackground, nil)
			}
		}
	}
	c.finishNamespace(next.Name)
	if out := c.getLocked(b.info.GVR.GroupResource(), next.Name); out != nil {
		return out
	}
	return next
}

// terminating is what a namespace's delete makes of it, as upstream's namespace REST does:
// deletionTimestamp now, phase Terminating.
func terminating(cur client.Object) *corev1.Namespace {
	next := markDeleting(cur).(*corev1.Namespace)
	next.SetDeletionGracePeriodSeconds(nil)
	next.Status.Phase = corev1.NamespaceTerminating
	return next
}

// finishNamespace removes a terminating namespace once nothing is left in it.
func (c *Cluster) finishNamespace(name string) {
	gr := namespacesGVR.GroupResource()
	obj := c.getLocked(gr, name)
	if obj == nil || obj.GetDeletionTimestamp() == nil {
		return
	}
	prefix := name + "/"
	for _, m := range c.objs.All() {
		for key := range m {
			if strings.HasPrefix(key, prefix) {
				return
			}
		}
	}
	next := obj.DeepCopyObject().(*corev1.Namespace)
	var fins []corev1.FinalizerName
	for _, f := range next.Spec.Finalizers {
		if f != corev1.FinalizerKubernetes {
			fins = append(fins, f)
		}
	}
	next.Spec.Finalizers = fins
	if len(fins) == 0 && len(next.Finalizers) == 0 {
		c.eraseLocked(gr, obj, next)
		return
	}
	if !equality.Semantic.DeepEqual(next, obj) {
		c.storeLocked(gr, next, obj)
	}
}
