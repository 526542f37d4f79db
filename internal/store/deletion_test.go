package store

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The registry's part of deletion, as kube-apiserver's: the propagation policy becomes the orphan
// or foregroundDeletion finalizer, which the garbage collector (package simulate, not running
// here) acts on; a namespace's delete marks it Terminating until namespaces/finalize empties its
// spec.finalizers.

func TestPropagationPolicyBecomesAFinalizer(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	for _, tc := range []struct {
		name   string
		policy *metav1.DeletionPropagation
		want   []string // nil: removed at once
	}{
		{"background", ptr.To(metav1.DeletePropagationBackground), nil},
		{"default", nil, nil},
		{"orphan", ptr.To(metav1.DeletePropagationOrphan), []string{metav1.FinalizerOrphanDependents}},
		{"foreground", ptr.To(metav1.DeletePropagationForeground), []string{metav1.FinalizerDeleteDependents}},
	} {
		cm := mustCreate(t, c, configMap("default", tc.name, nil))
		out, err := c.Delete(configMapsGVR, "default", tc.name, DeleteOptions{PropagationPolicy: tc.policy})
		g.Expect(err).NotTo(HaveOccurred())
		if tc.want == nil {
			g.Expect(exists(c, cm)).To(BeFalse(), tc.name)
			continue
		}
		got := mustGet(t, c, cm)
		g.Expect(got.GetFinalizers()).To(Equal(tc.want), tc.name)
		g.Expect(got.GetDeletionTimestamp()).NotTo(BeNil(), tc.name)
		g.Expect(got.GetDeletionGracePeriodSeconds()).To(HaveValue(BeEquivalentTo(0)), tc.name)
		g.Expect(out.(*corev1.ConfigMap).Finalizers).To(Equal(tc.want), tc.name)
	}

	// A second delete with another policy switches the finalizer, keeping the deletionTimestamp;
	// one without a policy keeps it; background drops it, and the object goes.
	first := mustGet(t, c, configMap("default", "orphan", nil))
	_, err := c.Delete(configMapsGVR, "default", "orphan", DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
	g.Expect(err).NotTo(HaveOccurred())
	switched := mustGet(t, c, first)
	g.Expect(switched.GetFinalizers()).To(Equal([]string{metav1.FinalizerDeleteDependents}))
	g.Expect(switched.GetDeletionTimestamp()).To(Equal(first.GetDeletionTimestamp()))
	_, err = c.Delete(configMapsGVR, "default", "orphan", DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(mustGet(t, c, first).GetResourceVersion()).To(Equal(switched.GetResourceVersion()), "nothing changes")
	_, err = c.Delete(configMapsGVR, "default", "orphan", DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exists(c, first)).To(BeFalse())

	// Removing the garbage collector's finalizer removes the object, as any last finalizer.
	_, err = c.Patch(configMapsGVR, "default", "foreground", "application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`), PatchOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exists(c, configMap("default", "foreground", nil))).To(BeFalse())
}

func TestNamespaceDeletionWaitsForFinalize(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	nsObj := mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "work"}})
	mustCreate(t, c, configMap("work", "cm", nil))
	out, err := c.Delete(namespacesGVR, "", "work", DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	ns := out.(*corev1.Namespace)
	g.Expect(ns.Status.Phase).To(Equal(corev1.NamespaceTerminating))
	g.Expect(ns.DeletionTimestamp).NotTo(BeNil())
	g.Expect(ns.Spec.Finalizers).To(Equal([]corev1.FinalizerName{corev1.FinalizerKubernetes}))
	g.Expect(exists(c, configMap("work", "cm", nil))).To(BeTrue(), "the namespace controller deletes the content")

	// Deleting it again while it terminates answers as upstream's namespace REST.
	_, err = c.Delete(namespacesGVR, "", "work", DeleteOptions{})
	g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("The system is ensuring all content is removed from this namespace."))

	// A status update leaves it (spec.finalizers still hold it); an update cannot change them.
	cur := mustGet(t, c, nsObj).(*corev1.Namespace)
	cur.Spec.Finalizers = nil
	_, err = c.Update(namespacesGVR, "", cur, UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(mustGet(t, c, nsObj).(*corev1.Namespace).Spec.Finalizers).To(HaveLen(1))

	// namespaces/finalize refuses a finalizer that is not a qualified name, then removes the
	// namespace when it takes the last one.
	cur = mustGet(t, c, nsObj).(*corev1.Namespace)
	cur.Spec.Finalizers = []corev1.FinalizerName{"not a name"}
	_, err = c.Update(namespacesGVR, "", cur, UpdateOptions{Subresource: "finalize"})
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	cur.Spec.Finalizers = nil
	_, err = c.Update(namespacesGVR, "", cur, UpdateOptions{Subresource: "finalize"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exists(c, nsObj)).To(BeFalse())

	// Other kinds have no finalize.
	_, err = c.Update(configMapsGVR, "default", configMap("default", "x", nil), UpdateOptions{Subresource: "finalize"})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)
}
