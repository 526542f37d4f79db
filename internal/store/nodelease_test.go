package store

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func readyNode(name string, ready corev1.ConditionStatus) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
}

func getLease(t *testing.T, c *Cluster, name string) *coordinationv1.Lease {
	t.Helper()
	obj, err := c.Get(leasesGVR, nodeLeaseNamespace, name)
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*coordinationv1.Lease)
}

// Every Node gets its Lease, owned by it; a read of the leases renews a Ready node's stale lease
// and leaves a NotReady node's stale; the lease goes with its Node.
func TestNodeLeases(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	ready := mustCreate(t, c, readyNode("ready", corev1.ConditionTrue))
	mustCreate(t, c, readyNode("down", corev1.ConditionFalse))

	lease := getLease(t, c, "ready")
	g.Expect(*lease.Spec.HolderIdentity).To(Equal("ready"))
	g.Expect(*lease.Spec.LeaseDurationSeconds).To(BeEquivalentTo(40))
	g.Expect(lease.OwnerReferences).To(ConsistOf(HaveField("UID", ready.GetUID())))
	g.Expect(time.Since(lease.Spec.RenewTime.Time)).To(BeNumerically("<", time.Minute))

	// Make both leases old, as if the last renewal was a minute ago.
	old := metav1.NewMicroTime(time.Now().Add(-time.Minute))
	for _, name := range []string{"ready", "down"} {
		l := getLease(t, c, name)
		l.Spec.RenewTime = &old
		_, err := c.Update(leasesGVR, nodeLeaseNamespace, l, UpdateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	c.leases.renewedAt.Store(0)
	list, err := c.List(leasesGVR, nodeLeaseNamespace, ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	renewed := map[string]time.Time{}
	for _, l := range list.(*coordinationv1.LeaseList).Items {
		renewed[l.Name] = l.Spec.RenewTime.Time
	}
	g.Expect(time.Since(renewed["ready"])).To(BeNumerically("<", 10*time.Second), "a Ready node's kubelet renews")
	g.Expect(renewed["down"]).To(BeTemporally("~", old.Time, time.Second), "a NotReady node's lease goes stale")

	_, err = c.Delete(nodesGVR, "", "ready", DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = c.Get(leasesGVR, nodeLeaseNamespace, "ready")
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the garbage collector deletes the lease with its Node: %v", err)
}
