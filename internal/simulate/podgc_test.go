package simulate_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/simulate"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// The pods of a deleted node are force-deleted, as the pod garbage collector does: no kubelet
// is left to confirm their termination.
func TestPodsOfADeletedNodeAreCollected(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t, simulate.Options{PodStopDelay: time.Hour})
	node := mustCreate(t, c, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}})
	running := mustCreate(t, c, scheduledPod("default", "running"))
	terminating := mustCreate(t, c, scheduledPod("default", "terminating"))
	deletePod(t, c, "terminating", nil) // waits for a kubelet that will not answer within the test
	p := scheduledPod("default", "held")
	p.Finalizers = []string{"example.com/hold"}
	held := mustCreate(t, c, p)
	other := scheduledPod("default", "elsewhere")
	other.Spec.NodeName = "node-1"
	mustCreate(t, c, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
	elsewhere := mustCreate(t, c, other)

	_, err := c.Delete(nodesGVR, "", "node-0", store.DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exists(t, c, node)).To(BeFalse())
	g.Eventually(func() bool { return exists(t, c, running) }, safetyTimeout, poll).Should(BeFalse())
	g.Eventually(func() bool { return exists(t, c, terminating) }, safetyTimeout, poll).Should(BeFalse())
	g.Eventually(func() *metav1.Time { return mustGet(t, c, held).GetDeletionTimestamp() }, safetyTimeout, poll).
		NotTo(BeNil(), "finalizers still hold a pod")
	g.Expect(mustGet(t, c, held).GetDeletionGracePeriodSeconds()).To(HaveValue(BeEquivalentTo(0)))
	// As upstream, the pod garbage collector marks the pod Failed before it deletes it.
	heldPod := mustGet(t, c, held).(*corev1.Pod)
	g.Expect(heldPod.Status.Phase).To(Equal(corev1.PodFailed))
	g.Expect(heldPod.Status.Conditions).To(ContainElement(And(HaveField("Type", corev1.DisruptionTarget),
		HaveField("Status", corev1.ConditionTrue), HaveField("Reason", "DeletionByPodGC"))))
	g.Expect(mustGet(t, c, elsewhere).GetDeletionTimestamp()).To(BeNil())
}

// A pod bound to a node that is not there is collected once upstream's quarantine has passed
// (shortened here), also when the node went while the process was down; a pod on a node that
// exists is left alone.
func TestPodsOfAMissingNodeAreCollectedAfterQuarantine(t *testing.T) {
	g := NewWithT(t)
	db, err := storage.Open(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = db.Close() })
	long := func(s *simulate.Simulator) { s.SetPodGCQuarantine(time.Hour) }
	first := newComponentCluster(t, simulate.Options{PodStopDelay: time.Hour}, db, long)
	c := first.cluster
	mustCreate(t, c, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}})
	mustCreate(t, c, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
	ghost := pod("default", "ghost", nil)
	ghost.Spec.NodeName = "nowhere"
	ghost = mustCreate(t, c, ghost).(*corev1.Pod)
	orphan := pod("default", "orphan", nil)
	orphan.Spec.NodeName = "node-1"
	orphan = mustCreate(t, c, orphan).(*corev1.Pod)
	kept := mustCreate(t, c, scheduledPod("default", "kept"))
	g.Consistently(func() bool { return exists(t, c, ghost) }, 200*time.Millisecond, poll).Should(BeTrue(), "quarantined")
	first.manager.Close()

	// node-1 goes while no simulator runs (as if the process were down).
	bare := store.NewManager(store.WithStorage(db))
	down, err := bare.AddCluster("test", store.ClusterOptions{KubernetesVersion: testVersion})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = down.Delete(nodesGVR, "", "node-1", store.DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exists(t, down, orphan)).To(BeTrue())
	bare.Close()

	c = newComponentCluster(t, simulate.Options{PodStopDelay: time.Hour}, db,
		func(s *simulate.Simulator) { s.SetPodGCQuarantine(100 * time.Millisecond) }).cluster
	g.Eventually(func() bool { return exists(t, c, ghost) }, safetyTimeout, poll).Should(BeFalse())
	g.Eventually(func() bool { return exists(t, c, orphan) }, safetyTimeout, poll).Should(BeFalse())
	g.Consistently(func() *metav1.Time { return mustGet(t, c, kept).GetDeletionTimestamp() }, 300*time.Millisecond, poll).Should(BeNil())
}
