package simulate_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/simulate"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// The namespace controller (namespace.go), in a cluster with workloads off.

func namespaceCondition(t *testing.T, c *store.Cluster, name string, typ corev1.NamespaceConditionType) corev1.NamespaceCondition {
	t.Helper()
	for _, cond := range mustGet(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}).(*corev1.Namespace).Status.Conditions {
		if cond.Type == typ {
			return cond
		}
	}
	return corev1.NamespaceCondition{}
}

func TestNamespaceLifecycle(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "work"}}
	mustCreate(t, c, nsObj)
	mustCreate(t, c, configMap("work", "plain", nil))
	held := configMap("work", "held", nil)
	held.Finalizers = []string{"example.com/hold"}
	mustCreate(t, c, held)
	other := mustCreate(t, c, configMap("default", "other", nil))

	out, err := c.Delete(namespacesGVR, "", "work", store.DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	ns := out.(*corev1.Namespace)
	g.Expect(ns.Status.Phase).To(Equal(corev1.NamespaceTerminating))
	g.Expect(ns.DeletionTimestamp).NotTo(BeNil())
	g.Eventually(func() bool { return exists(t, c, configMap("work", "plain", nil)) }, safetyTimeout, poll).Should(BeFalse(), "content is deleted")
	g.Expect(exists(t, c, held)).To(BeTrue(), "finalizers hold content")
	g.Expect(exists(t, c, other)).To(BeTrue(), "other namespaces are untouched")
	// What remains shows in the namespace's conditions, as upstream's namespace controller writes them.
	g.Eventually(func() corev1.NamespaceCondition {
		return namespaceCondition(t, c, "work", corev1.NamespaceFinalizersRemaining)
	}, safetyTimeout, poll).
		Should(And(HaveField("Status", corev1.ConditionTrue), HaveField("Reason", "SomeFinalizersRemain"),
			HaveField("Message", "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances")))
	g.Expect(namespaceCondition(t, c, "work", corev1.NamespaceContentRemaining)).To(And(HaveField("Status", corev1.ConditionTrue),
		HaveField("Message", "Some resources are remaining: configmaps. has 1 resource instances")))
	g.Expect(namespaceCondition(t, c, "work", corev1.NamespaceDeletionContentFailure)).To(And(HaveField("Status", corev1.ConditionFalse),
		HaveField("Reason", "ContentDeleted")))

	_, err = c.Create(configMapsGVR, "work", configMap("work", "new", nil), store.CreateOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue())
	g.Expect(apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause)).To(BeTrue())

	_, err = c.Patch(configMapsGVR, "work", "held", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), store.PatchOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() bool { return exists(t, c, nsObj) }, safetyTimeout, poll).Should(BeFalse(), "namespace goes once empty")

	_, err = c.Delete(namespacesGVR, "", "kube-system", store.DeleteOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue())
}

// A namespace left Terminating when the process stopped is emptied and removed after the restart.
func TestTerminatingNamespaceFinishesAfterRestart(t *testing.T) {
	g := NewWithT(t)
	db, err := storage.Open(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = db.Close() })
	bare := store.NewManager(store.WithStorage(db)) // no simulator: as if the process stopped first
	c, err := bare.AddCluster("test", store.ClusterOptions{KubernetesVersion: testVersion})
	g.Expect(err).NotTo(HaveOccurred())
	nsObj := mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "work"}})
	cm := mustCreate(t, c, configMap("work", "cm", nil))
	_, err = c.Delete(namespacesGVR, "", "work", store.DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(existence(t, c, nsObj, cm)()).To(Equal([]bool{true, true}), "nothing empties it without the simulator")
	bare.Close()

	c = newComponentCluster(t, simulate.Options{}, db).cluster
	g.Eventually(existence(t, c, nsObj, cm), safetyTimeout, poll).Should(Equal([]bool{false, false}))
}
