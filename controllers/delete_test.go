package controllers

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
)

// deleteMachine deletes a GoofyMachine and reconciles it until it is gone.
func (h *harness) deleteMachine(t testing.TB, gm *infrav1.GoofyMachine) {
	t.Helper()
	ctx := context.Background()
	if err := k8sClient.Delete(ctx, gm); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		h.reconcileMachine(t, gm)
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(gm), &infrav1.GoofyMachine{}); apierrors.IsNotFound(err) {
			return
		}
	}
	t.Fatalf("GoofyMachine %s still exists after 3 reconciles of its deletion", gm.Name)
}

// reconcileToPhase reconciles a machine until the given phase is in progress.
func (h *harness) reconcileToPhase(t testing.TB, gm *infrav1.GoofyMachine, condType string) {
	t.Helper()
	for i := 0; i < 5; i++ {
		h.reconcileMachine(t, gm)
		get(t, gm)
		if c := condition(gm, condType); c != nil && c.Reason == infrav1.ProvisioningReason {
			return
		}
	}
	t.Fatalf("GoofyMachine %s did not reach phase %s: %+v", gm.Name, condType, gm.Status.Conditions)
}

// TestMachineDeletionInEveryPhase deletes control-plane machines stopped in each phase and checks
// that each deletion removes exactly what its phases added: the Node, the static pods, the etcd
// member (moving leadership away from a leader) and the API server, the last of which stops the
// listener while its port stays reserved for the cluster.
func TestMachineDeletionInEveryPhase(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	h := newHarness(t)
	f := newFixture(t, newNamespace(t), "del", nil)
	h.provisionCluster(t, f)
	key := mux.ClusterKey(f.ns, "del")
	hour := phaseOf(time.Hour, "")

	// Two Ready control-plane machines; the first leads etcd.
	_, cp0 := newMachine(t, f, "del-cp-0", machineOpts{controlPlane: true})
	h.reconcileUntilReady(t, cp0)
	_, cp1 := newMachine(t, f, "del-cp-1", machineOpts{controlPlane: true})
	h.reconcileUntilReady(t, cp1)

	// Machines stopped in each phase.
	_, inVM := newMachine(t, f, "del-vm", machineOpts{controlPlane: true, backend: &infrav1.InMemoryMachineBackend{VM: hour}})
	h.reconcileToPhase(t, inVM, infrav1.VMProvisionedCondition)
	_, inNode := newMachine(t, f, "del-node", machineOpts{controlPlane: true, backend: &infrav1.InMemoryMachineBackend{Node: hour}})
	h.reconcileToPhase(t, inNode, infrav1.NodeProvisionedCondition)
	_, inEtcd := newMachine(t, f, "del-etcd", machineOpts{controlPlane: true, backend: &infrav1.InMemoryMachineBackend{Etcd: hour}})
	h.reconcileToPhase(t, inEtcd, infrav1.EtcdProvisionedCondition)
	_, inAPI := newMachine(t, f, "del-api", machineOpts{controlPlane: true, backend: &infrav1.InMemoryMachineBackend{APIServer: hour}})
	h.reconcileToPhase(t, inAPI, infrav1.APIServerProvisionedCondition)

	l, _ := h.mux.Listener(key)
	cs := workloadClient(t, l)
	nodeExists := func(name string) bool {
		_, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	podExists := func(name string) bool {
		_, err := cs.CoreV1().Pods(metav1.NamespaceSystem).Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	etcd := etcdClient(t, f, l, "del-cp-1")
	members := func() []string {
		ms, err := etcd.Members(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		var names []string
		for _, m := range ms {
			names = append(names, m.Name)
		}
		return names
	}
	g.Expect(members()).To(ConsistOf("del-cp-0", "del-cp-1", "del-api"))

	// In the VM phase: nothing in the workload cluster yet; the reserved IP is released.
	g.Expect(internalIP(inVM)).To(BeEmpty())
	h.deleteMachine(t, inVM)

	// In the Node phase (VM done): its IP is released with it.
	ip := internalIP(inNode)
	g.Expect(ip).NotTo(BeEmpty())
	g.Expect(nodeExists("del-node")).To(BeFalse())
	h.deleteMachine(t, inNode)

	// In the etcd phase (Node done): the Node goes.
	g.Expect(nodeExists("del-etcd")).To(BeTrue())
	h.deleteMachine(t, inEtcd)
	g.Expect(nodeExists("del-etcd")).To(BeFalse())

	// In the API server phase (etcd done): Node, etcd pod and etcd member go.
	g.Expect(podExists("etcd-del-api")).To(BeTrue())
	h.deleteMachine(t, inAPI)
	g.Expect(nodeExists("del-api")).To(BeFalse())
	g.Expect(podExists("etcd-del-api")).To(BeFalse())
	g.Expect(h.mux.HasEtcdMember(key, "etcd-del-api")).To(BeFalse())
	g.Expect(members()).To(ConsistOf("del-cp-0", "del-cp-1"))

	// A new machine reuses the released IP: allocations follow the machines.
	_, reuse := newMachine(t, f, "del-reuse", machineOpts{controlPlane: true, backend: &infrav1.InMemoryMachineBackend{Node: hour}})
	h.reconcileToPhase(t, reuse, infrav1.NodeProvisionedCondition)
	g.Expect(internalIP(reuse)).To(Equal(ip))
	h.deleteMachine(t, reuse)

	// Ready: deleting the etcd leader moves leadership to the remaining member.
	leaderBefore := etcdLeaderName(t, f, l, "del-cp-1")
	g.Expect(leaderBefore).To(Equal("del-cp-0"))
	h.deleteMachine(t, cp0)
	g.Expect(nodeExists("del-cp-0")).To(BeFalse())
	for _, c := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		g.Expect(podExists(c+"-del-cp-0")).To(BeFalse(), c)
	}
	g.Expect(h.mux.HasAPIServer(key, "kube-apiserver-del-cp-0")).To(BeFalse())
	g.Expect(members()).To(ConsistOf("del-cp-1"))
	g.Expect(etcdLeaderName(t, f, l, "del-cp-1")).To(Equal("del-cp-1"))
	// The remaining API server still serves.
	_, err := cs.Discovery().ServerVersion()
	g.Expect(err).NotTo(HaveOccurred())

	// The last API server stops the listener; the port stays the cluster's.
	h.deleteMachine(t, cp1)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(l.Port()))
	_, err = net.DialTimeout("tcp", addr, time.Second)
	g.Expect(err).To(HaveOccurred(), "nothing serves %s after the last API server is gone", addr)
	l2, ok := h.mux.Listener(key)
	g.Expect(ok).To(BeTrue())
	g.Expect(l2.Port()).To(Equal(l.Port()))
}

// TestMachineDeletionWithOwnersGone: a GoofyMachine whose Cluster (or Machine) is already gone is
// released at once instead of failing forever on the missing owner.
func TestMachineDeletionWithOwnersGone(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	h := newHarness(t)
	f := newFixture(t, newNamespace(t), "gone", nil)
	h.provisionCluster(t, f)
	machine, gm := newMachine(t, f, "gone-cp-0", machineOpts{controlPlane: true})
	h.reconcileUntilReady(t, gm)
	_, gm2 := newMachine(t, f, "gone-cp-1", machineOpts{controlPlane: true})
	h.reconcileUntilReady(t, gm2)

	// The Machine goes first (e.g. its finalizer was removed by hand).
	g.Expect(k8sClient.Delete(ctx, machine)).To(Succeed())
	g.Expect(apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(machine), machine))).To(BeTrue())
	h.deleteMachine(t, gm)
	// What it added to the still-running workload cluster went with it.
	key := mux.ClusterKey(f.ns, "gone")
	cs := workloadClient(t, mustListener(t, h, f))
	_, err := cs.CoreV1().Nodes().Get(ctx, "gone-cp-0", metav1.GetOptions{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
	g.Expect(h.mux.HasEtcdMember(key, "etcd-gone-cp-0")).To(BeFalse())
	g.Expect(h.mux.HasAPIServer(key, "kube-apiserver-gone-cp-0")).To(BeFalse())

	// The Cluster goes first.
	g.Expect(k8sClient.Delete(ctx, f.cluster)).To(Succeed())
	g.Expect(apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(f.cluster), f.cluster))).To(BeTrue())
	h.deleteMachine(t, gm2)

	// So does the GoofyCluster, freeing its listener and store.
	g.Expect(k8sClient.Delete(ctx, f.gc)).To(Succeed())
	g.Expect(h.reconcileCluster(t, f.gc)).To(Equal(ctrl.Result{}))
	g.Expect(apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(f.gc), f.gc))).To(BeTrue())
	_, ok := h.mux.Listener(key)
	g.Expect(ok).To(BeFalse())
	_, ok = h.stores.GetCluster(key)
	g.Expect(ok).To(BeFalse())
}

// TestClusterDeletion frees the listener, the port and the workload store.
func TestClusterDeletion(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	h := newHarness(t)
	f := newFixture(t, newNamespace(t), "cdel", nil)
	h.provisionCluster(t, f)
	_, gm := newMachine(t, f, "cdel-cp-0", machineOpts{controlPlane: true})
	h.reconcileUntilReady(t, gm)
	port := int(f.gc.Spec.ControlPlaneEndpoint.Port)
	h.deleteMachine(t, gm)

	g.Expect(k8sClient.Delete(ctx, f.gc)).To(Succeed())
	h.reconcileCluster(t, f.gc)
	g.Expect(apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(f.gc), f.gc))).To(BeTrue())
	_, ok := h.stores.GetCluster(mux.ClusterKey(f.ns, "cdel"))
	g.Expect(ok).To(BeFalse())
	// The port is free again: the mux can hand it to another cluster.
	l, err := h.mux.InitWorkloadClusterListenerOnPort("other/cluster", port)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l.Port()).To(Equal(port))
	g.Expect(h.mux.DeleteWorkloadClusterListener("other/cluster")).To(Succeed())
}
