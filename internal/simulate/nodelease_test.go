package simulate_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/simulate"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

const nodeLeaseNamespace = "kube-node-lease"

// eventuallyLease waits for a node's Lease, which its kubelet creates after the Node registers.
func eventuallyLease(t *testing.T, c *store.Cluster, name string) *coordinationv1.Lease {
	t.Helper()
	var lease *coordinationv1.Lease
	NewWithT(t).Eventually(func() error {
		obj, err := c.Get(leasesGVR, nodeLeaseNamespace, name)
		if err == nil {
			lease = obj.(*coordinationv1.Lease)
		}
		return err
	}, safetyTimeout, poll).Should(Succeed())
	return lease
}

// Every Node gets its Lease, owned by it; a read of the leases renews a Ready node's stale lease
// and leaves a NotReady node's stale; the lease goes with its Node.
func TestNodeLeases(t *testing.T) {
	g := NewWithT(t)
	cl := newComponentCluster(t, simulate.Options{}, nil)
	c := cl.cluster
	ready := mustCreate(t, c, readyNode("ready", corev1.ConditionTrue))
	mustCreate(t, c, readyNode("down", corev1.ConditionFalse))

	lease := eventuallyLease(t, c, "ready")
	g.Expect(*lease.Spec.HolderIdentity).To(Equal("ready"))
	g.Expect(*lease.Spec.LeaseDurationSeconds).To(BeEquivalentTo(40))
	g.Expect(lease.OwnerReferences).To(ConsistOf(HaveField("UID", ready.GetUID())))
	g.Expect(time.Since(lease.Spec.RenewTime.Time)).To(BeNumerically("<", time.Minute))
	eventuallyLease(t, c, "down")

	// Make both leases old, as if the last renewal was a minute ago.
	old := metav1.NewMicroTime(time.Now().Add(-time.Minute))
	for _, name := range []string{"ready", "down"} {
		l := eventuallyLease(t, c, name)
		l.Spec.RenewTime = &old
		_, err := c.Update(leasesGVR, nodeLeaseNamespace, l, store.UpdateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	cl.sim.ForgetLeaseRenewal("test")
	list, err := c.List(leasesGVR, nodeLeaseNamespace, store.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	renewed := map[string]time.Time{}
	for _, l := range list.(*coordinationv1.LeaseList).Items {
		renewed[l.Name] = l.Spec.RenewTime.Time
	}
	g.Expect(time.Since(renewed["ready"])).To(BeNumerically("<", 10*time.Second), "a Ready node's kubelet renews")
	g.Expect(renewed["down"]).To(BeTemporally("~", old.Time, time.Second), "a NotReady node's lease goes stale")

	_, err = c.Delete(nodesGVR, "", "ready", store.DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() bool {
		_, err := c.Get(leasesGVR, nodeLeaseNamespace, "ready")
		return apierrors.IsNotFound(err)
	}, safetyTimeout, poll).Should(BeTrue(), "the garbage collector deletes the lease with its Node")
}

// A Node without a Lease (its lease deleted while the process was down, or a state written by a
// version without leases) gets one from the kubelets of the next life; so does one whose lease a
// client deletes.
func TestNodeLeaseIsCreatedAgain(t *testing.T) {
	g := NewWithT(t)
	db, err := storage.Open(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = db.Close() })
	bare := store.NewManager(store.WithStorage(db))
	c, err := bare.AddCluster("test", store.ClusterOptions{KubernetesVersion: testVersion})
	g.Expect(err).NotTo(HaveOccurred())
	mustCreate(t, c, readyNode("n1", corev1.ConditionTrue))
	_, err = c.Get(leasesGVR, nodeLeaseNamespace, "n1")
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no kubelet runs without a simulator: %v", err)
	bare.Close()

	c = newComponentCluster(t, simulate.Options{}, db).cluster
	first := eventuallyLease(t, c, "n1")
	_, err = c.Delete(leasesGVR, nodeLeaseNamespace, "n1", store.DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() bool {
		obj, err := c.Get(leasesGVR, nodeLeaseNamespace, "n1")
		return err == nil && obj.(*coordinationv1.Lease).UID != first.UID
	}, safetyTimeout, poll).Should(BeTrue())
}
