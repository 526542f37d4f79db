package simulate_test

import (
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/simulate"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// The garbage collector (garbagecollector.go), in a cluster with workloads off.

func deployment(ns, name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img"}}},
			},
		},
	}
}

func ownerRef(owner client.Object, kind, apiVersion string) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: owner.GetName(), UID: owner.GetUID(),
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
}

// existence is a poller of whether each object is still stored.
func existence(t *testing.T, c *store.Cluster, objs ...client.Object) func() []bool {
	return func() []bool {
		out := make([]bool, len(objs))
		for i, o := range objs {
			out[i] = exists(t, c, o)
		}
		return out
	}
}

func TestGarbageCollection(t *testing.T) {
	// owner (Deployment) -> rs (ReplicaSet) -> pod; each dependent blocks owner deletion.
	setup := func(t *testing.T, podFinalizer bool) (*store.Cluster, client.Object, client.Object, client.Object) {
		c := newTestCluster(t)
		d := mustCreate(t, c, deployment("default", "d"))
		rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "rs",
			OwnerReferences: []metav1.OwnerReference{ownerRef(d, "Deployment", "apps/v1")}},
			Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"a": "b"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img"}}}}}}
		rsOut := mustCreate(t, c, rs)
		p := pod("default", "p", nil)
		p.OwnerReferences = []metav1.OwnerReference{ownerRef(rsOut, "ReplicaSet", "apps/v1")}
		if podFinalizer {
			p.Finalizers = []string{"example.com/hold"}
		}
		return c, d, rsOut, mustCreate(t, c, p)
	}

	t.Run("background deletes owner then dependents", func(t *testing.T) {
		g := NewWithT(t)
		c, d, rs, p := setup(t, false)
		_, err := c.Delete(deploymentsGVR, "default", "d", store.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(exists(t, c, d)).To(BeFalse(), "the owner goes at once")
		g.Eventually(existence(t, c, d, rs, p), safetyTimeout, poll).Should(Equal([]bool{false, false, false}))
	})
	t.Run("default policy is background", func(t *testing.T) {
		g := NewWithT(t)
		c, d, rs, p := setup(t, false)
		_, err := c.Delete(deploymentsGVR, "default", "d", store.DeleteOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(exists(t, c, d)).To(BeFalse(), "the owner goes at once")
		g.Eventually(existence(t, c, d, rs, p), safetyTimeout, poll).Should(Equal([]bool{false, false, false}))
	})
	t.Run("orphan keeps dependents and strips the owner reference", func(t *testing.T) {
		g := NewWithT(t)
		c, d, rs, p := setup(t, false)
		out, err := c.Delete(deploymentsGVR, "default", "d", store.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan)})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out.(client.Object).GetFinalizers()).To(ContainElement(metav1.FinalizerOrphanDependents), "as upstream's registry marks it")
		g.Eventually(existence(t, c, d, rs, p), safetyTimeout, poll).Should(Equal([]bool{false, true, true}))
		g.Expect(mustGet(t, c, rs).GetOwnerReferences()).To(BeEmpty())
		g.Expect(mustGet(t, c, p).GetOwnerReferences()).To(HaveLen(1))
		g.Consistently(existence(t, c, rs, p), "200ms", poll).Should(Equal([]bool{true, true}))
	})
	t.Run("foreground waits for blocking dependents", func(t *testing.T) {
		g := NewWithT(t)
		c, d, rs, p := setup(t, true)
		out, err := c.Delete(deploymentsGVR, "default", "d", store.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
		g.Expect(err).NotTo(HaveOccurred())
		owner := out.(*appsv1.Deployment)
		g.Expect(owner.DeletionTimestamp).NotTo(BeNil())
		g.Expect(owner.Finalizers).To(ContainElement(metav1.FinalizerDeleteDependents))
		// The pod's finalizer holds the pod, which holds the rs, which holds the deployment.
		g.Eventually(func() *metav1.Time { return mustGet(t, c, p).GetDeletionTimestamp() }, safetyTimeout, poll).NotTo(BeNil())
		g.Expect(mustGet(t, c, rs).GetDeletionTimestamp()).NotTo(BeNil(), "deleted in the foreground: it has a dependent")
		g.Expect(mustGet(t, c, rs).GetFinalizers()).To(ContainElement(metav1.FinalizerDeleteDependents))
		g.Consistently(existence(t, c, d, rs, p), "200ms", poll).Should(Equal([]bool{true, true, true}))

		_, err = c.Patch(podsGVR, "default", "p", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), store.PatchOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Eventually(existence(t, c, d, rs, p), safetyTimeout, poll).Should(Equal([]bool{false, false, false}))
	})
	t.Run("dependent with another live owner only loses the reference", func(t *testing.T) {
		g := NewWithT(t)
		c := newTestCluster(t)
		a := mustCreate(t, c, configMap("default", "a", nil))
		b := mustCreate(t, c, configMap("default", "b", nil))
		dep := configMap("default", "dep", nil)
		second := ownerRef(b, "ConfigMap", "v1")
		second.Controller = nil
		dep.OwnerReferences = []metav1.OwnerReference{ownerRef(a, "ConfigMap", "v1"), second}
		mustCreate(t, c, dep)
		_, err := c.Delete(configMapsGVR, "default", "a", store.DeleteOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Eventually(func() []metav1.OwnerReference { return mustGet(t, c, dep).GetOwnerReferences() }, safetyTimeout, poll).Should(HaveLen(1))
		got := mustGet(t, c, dep)
		g.Expect(got.GetOwnerReferences()).To(HaveLen(1))
		g.Expect(got.GetOwnerReferences()[0].Name).To(Equal("b"))
	})
	t.Run("an owner of an unserved kind cannot be checked and keeps the dependent", func(t *testing.T) {
		g := NewWithT(t)
		c := newTestCluster(t)
		a := mustCreate(t, c, configMap("default", "a", nil))
		dep := configMap("default", "dep", nil)
		dep.OwnerReferences = []metav1.OwnerReference{ownerRef(a, "ConfigMap", "v1"),
			{APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "Machine", Name: "m", UID: "machine-uid"}}
		mustCreate(t, c, dep)
		_, err := c.Delete(configMapsGVR, "default", "a", store.DeleteOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Eventually(func() []metav1.OwnerReference { return mustGet(t, c, dep).GetOwnerReferences() }, safetyTimeout, poll).Should(HaveLen(1))
		g.Consistently(func() bool { return exists(t, c, dep) }, "200ms", poll).Should(BeTrue())
	})
	t.Run("a dependent created for an owner that does not exist is collected", func(t *testing.T) {
		g := NewWithT(t)
		c := newTestCluster(t)
		dep := configMap("default", "dep", nil)
		dep.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "nobody", UID: "no-such-uid"}}
		mustCreate(t, c, dep)
		g.Eventually(func() bool { return exists(t, c, dep) }, safetyTimeout, poll).Should(BeFalse())
	})
}

// The garbage collector reacts to committed changes of owner references: a dependent that drops
// its blocking reference lets its owner's foreground deletion finish.
func TestOrphaningTheBlockingDependentFinishesForegroundDeletion(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	owner := mustCreate(t, c, configMap("default", "owner", nil))
	dep := configMap("default", "dep", nil)
	dep.Finalizers = []string{"example.com/hold"}
	dep.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: owner.GetUID(), BlockOwnerDeletion: ptr.To(true)}}
	mustCreate(t, c, dep)
	_, err := c.Delete(configMapsGVR, "default", "owner",
		store.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() *metav1.Time { return mustGet(t, c, dep).GetDeletionTimestamp() }, safetyTimeout, poll).NotTo(BeNil())
	g.Expect(exists(t, c, owner)).To(BeTrue(), "the finalizer-held dependent blocks its owner")

	cur := mustGet(t, c, dep).(*corev1.ConfigMap)
	cur.OwnerReferences = nil
	_, err = c.Update(configMapsGVR, "default", cur, store.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() bool {
		_, err := c.Get(configMapsGVR, "default", "owner")
		return apierrors.IsNotFound(err)
	}, safetyTimeout, poll).Should(BeTrue(), "no dependent blocks it any more")
}

// What was left to collect when the process stopped is collected after the restart: a dependent
// whose owner went, and an owner left in foreground or orphan deletion.
func TestGarbageIsCollectedAfterRestart(t *testing.T) {
	g := NewWithT(t)
	db, err := storage.Open(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = db.Close() })
	bare := store.NewManager(store.WithStorage(db)) // no simulator: as if the process stopped first
	c, err := bare.AddCluster("test", store.ClusterOptions{KubernetesVersion: testVersion})
	g.Expect(err).NotTo(HaveOccurred())
	gone := mustCreate(t, c, configMap("default", "gone", nil))
	orphaned := configMap("default", "orphaned", nil)
	orphaned.OwnerReferences = []metav1.OwnerReference{ownerRef(gone, "ConfigMap", "v1")}
	orphaned = mustCreate(t, c, orphaned).(*corev1.ConfigMap)
	fg := mustCreate(t, c, configMap("default", "fg", nil))
	blocking := configMap("default", "blocking", nil)
	blocking.OwnerReferences = []metav1.OwnerReference{ownerRef(fg, "ConfigMap", "v1")}
	blocking = mustCreate(t, c, blocking).(*corev1.ConfigMap)
	orphaner := mustCreate(t, c, configMap("default", "orphaner", nil))
	kept := configMap("default", "kept", nil)
	kept.OwnerReferences = []metav1.OwnerReference{ownerRef(orphaner, "ConfigMap", "v1")}
	kept = mustCreate(t, c, kept).(*corev1.ConfigMap)
	_, err = c.Delete(configMapsGVR, "default", "gone", store.DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = c.Delete(configMapsGVR, "default", "fg", store.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = c.Delete(configMapsGVR, "default", "orphaner", store.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(existence(t, c, gone, orphaned, fg, blocking, orphaner, kept)()).To(Equal([]bool{false, true, true, true, true, true}),
		"nothing collects without the simulator")
	bare.Close()

	c = newComponentCluster(t, simulate.Options{}, db).cluster
	g.Eventually(existence(t, c, orphaned, fg, blocking, orphaner), safetyTimeout, poll).Should(Equal([]bool{false, false, false, false}))
	g.Expect(mustGet(t, c, kept).GetOwnerReferences()).To(BeEmpty())
}
