package store

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestControllerRuntimeClient(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c := newTestCluster(t)
	cl := c.Client()

	// Create / Get.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"role": "cp"}},
		Spec: corev1.NodeSpec{ProviderID: "goofy://n1", Taints: []corev1.Taint{{Key: "node.cluster.x-k8s.io/uninitialized", Effect: corev1.TaintEffectNoSchedule}}}}
	g.Expect(cl.Create(ctx, node)).To(Succeed())
	g.Expect(node.UID).NotTo(BeEmpty(), "the result is written back")
	got := &corev1.Node{}
	g.Expect(cl.Get(ctx, client.ObjectKey{Name: "n1"}, got)).To(Succeed())
	g.Expect(got.Spec.ProviderID).To(Equal("goofy://n1"))
	err := cl.Get(ctx, client.ObjectKey{Name: "missing"}, &corev1.Node{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue())

	// Update and Status().Update.
	got.Labels["extra"] = "1"
	g.Expect(cl.Update(ctx, got)).To(Succeed())
	got.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	g.Expect(cl.Status().Update(ctx, got)).To(Succeed())
	g.Expect(cl.Get(ctx, client.ObjectKeyFromObject(got), got)).To(Succeed())
	g.Expect(got.Status.Conditions).To(HaveLen(1))
	g.Expect(got.Labels).To(HaveKey("extra"))

	// Strategic merge patch with optimistic lock removing the taint, as CAPI does.
	base := got.DeepCopy()
	got.Spec.Taints = nil
	g.Expect(cl.Patch(ctx, got, client.StrategicMergeFrom(base, client.MergeFromWithOptimisticLock{}))).To(Succeed())
	g.Expect(got.Spec.Taints).To(BeEmpty())
	stale := base.DeepCopy()
	stale.Labels["x"] = "y"
	err = cl.Patch(ctx, stale, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	g.Expect(apierrors.IsConflict(err)).To(BeTrue())

	// Status().Patch.
	patchBase := got.DeepCopy()
	got.Status.Conditions[0].Status = corev1.ConditionFalse
	g.Expect(cl.Status().Patch(ctx, got, client.MergeFrom(patchBase))).To(Succeed())
	g.Expect(got.Status.Conditions[0].Status).To(Equal(corev1.ConditionFalse))

	// List with label and field selectors.
	list := &corev1.NodeList{}
	g.Expect(cl.List(ctx, list, client.MatchingLabels{"role": "cp"})).To(Succeed())
	g.Expect(list.Items).To(HaveLen(1))
	g.Expect(cl.List(ctx, list, client.MatchingFields{"metadata.name": "other"})).To(Succeed())
	g.Expect(list.Items).To(BeEmpty())
	g.Expect(cl.List(ctx, list, client.MatchingFields{"spec.providerID": "x"})).To(Satisfy(apierrors.IsBadRequest))

	// Namespaced objects, DeleteAllOf and Delete.
	for _, n := range []string{"a", "b"} {
		g.Expect(cl.Create(ctx, pod("kube-system", n, map[string]string{"tier": "control-plane"}))).To(Succeed())
	}
	pods := &corev1.PodList{}
	g.Expect(cl.List(ctx, pods, client.InNamespace("kube-system"), client.Limit(1))).To(Succeed())
	g.Expect(pods.Items).To(HaveLen(1))
	g.Expect(pods.Continue).NotTo(BeEmpty())
	g.Expect(cl.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace("kube-system"), client.MatchingLabels{"tier": "control-plane"})).To(Succeed())
	g.Expect(cl.List(ctx, pods, client.InNamespace("kube-system"))).To(Succeed())
	g.Expect(pods.Items).To(BeEmpty())
	g.Expect(cl.Delete(ctx, got)).To(Succeed())
	g.Expect(apierrors.IsNotFound(cl.Get(ctx, client.ObjectKeyFromObject(got), got))).To(BeTrue())

	// Dry run.
	cm := configMap("default", "dry", nil)
	g.Expect(cl.Create(ctx, cm, client.DryRunAll)).To(Succeed())
	g.Expect(apierrors.IsNotFound(cl.Get(ctx, client.ObjectKeyFromObject(cm), cm))).To(BeTrue())

	// Mapper and scheme.
	gvk, err := cl.GroupVersionKindFor(&appsv1.Deployment{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(gvk).To(Equal(appsv1.SchemeGroupVersion.WithKind("Deployment")))
	namespaced, err := cl.IsObjectNamespaced(&corev1.Node{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(namespaced).To(BeFalse())
	mapping, err := cl.RESTMapper().RESTMapping(schema.GroupKind{Group: "apps", Kind: "Deployment"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(mapping.Resource.Resource).To(Equal("deployments"))
	g.Expect(cl.Scheme().IsGroupRegistered("apiextensions.k8s.io")).To(BeTrue())
}

func TestControllerRuntimeClientApplyAndUnstructured(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c := newTestCluster(t)
	cl := c.Client()

	ac := corev1ac.ConfigMap("cfg", "default").WithData(map[string]string{"a": "1"})
	g.Expect(cl.Apply(ctx, ac, client.FieldOwner("owner-a"))).To(Succeed())
	g.Expect(ac.UID).NotTo(BeNil(), "the applied result is decoded back")
	conflicting := corev1ac.ConfigMap("cfg", "default").WithData(map[string]string{"a": "2"})
	g.Expect(apierrors.IsConflict(cl.Apply(ctx, conflicting, client.FieldOwner("owner-b")))).To(BeTrue())
	g.Expect(cl.Apply(ctx, conflicting, client.FieldOwner("owner-b"), client.ForceOwnership)).To(Succeed())

	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	g.Expect(cl.Get(ctx, client.ObjectKey{Namespace: "default", Name: "cfg"}, u)).To(Succeed())
	data, _, _ := unstructured.NestedStringMap(u.Object, "data")
	g.Expect(data).To(HaveKeyWithValue("a", "2"))

	ul := &unstructured.UnstructuredList{}
	ul.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
	g.Expect(cl.List(ctx, ul, client.InNamespace("default"))).To(Succeed())
	g.Expect(ul.Items).To(HaveLen(1))
	g.Expect(ul.Items[0].GetKind()).To(Equal("ConfigMap"))

	nu := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]interface{}{"name": "s", "namespace": "default"}, "stringData": map[string]interface{}{"k": "v"}}}
	g.Expect(cl.Create(ctx, nu)).To(Succeed())
	g.Expect(nu.GetUID()).NotTo(BeEmpty())
	secret := &corev1.Secret{}
	g.Expect(cl.Get(ctx, client.ObjectKeyFromObject(nu), secret)).To(Succeed())
	g.Expect(secret.Data).To(HaveKeyWithValue("k", []byte("v")), "stringData is folded into data")
	g.Expect(secret.StringData).To(BeEmpty())

	// Foreground deletion through the client: marked with the foregroundDeletion finalizer, which
	// the garbage collector (package simulate) removes.
	g.Expect(cl.Delete(ctx, nu, client.PropagationPolicy(metav1.DeletePropagationForeground), client.GracePeriodSeconds(0))).To(Succeed())
	g.Expect(mustGet(t, c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "s"}}).GetFinalizers()).
		To(ConsistOf(metav1.FinalizerDeleteDependents))

	// Subresources other than status are served by the HTTP layer.
	err := cl.SubResource("eviction").Create(ctx, pod("default", "p", nil), &corev1.Pod{})
	g.Expect(apierrors.IsMethodNotSupported(err)).To(BeTrue())
}

// TestClientWithoutManagedFields: the untracked client's creates, updates and patches leave
// managedFields out, the default client records them, and server-side apply always tracks.
func TestClientWithoutManagedFields(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c := newTestCluster(t)
	in := c.Client(WithoutManagedFields())

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "untracked"}, Data: map[string]string{"a": "1"}}
	g.Expect(in.Create(ctx, cm)).To(Succeed())
	g.Expect(cm.ManagedFields).To(BeEmpty())
	base := cm.DeepCopy()
	cm.Data["b"] = "2"
	g.Expect(in.Patch(ctx, cm, client.MergeFrom(base))).To(Succeed())
	cm.Data["c"] = "3"
	g.Expect(in.Update(ctx, cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveLen(3))
	g.Expect(cm.ManagedFields).To(BeEmpty())

	tracked := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "tracked"}, Data: map[string]string{"a": "1"}}
	g.Expect(c.Client().Create(ctx, tracked)).To(Succeed())
	g.Expect(tracked.ManagedFields).To(HaveLen(1))
	g.Expect(tracked.ManagedFields[0].Manager).To(Equal(defaultFieldManager))

	ac := corev1ac.ConfigMap("applied", "default").WithData(map[string]string{"x": "y"})
	g.Expect(in.Apply(ctx, ac, client.FieldOwner("applier"))).To(Succeed())
	got := &corev1.ConfigMap{}
	g.Expect(in.Get(ctx, client.ObjectKey{Namespace: "default", Name: "applied"}, got)).To(Succeed())
	g.Expect(got.ManagedFields).To(HaveLen(1))
	g.Expect(got.ManagedFields[0].Manager).To(Equal("applier"))
}
