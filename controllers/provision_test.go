package controllers

import (
	"context"
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/workload"
)

// TestReadyMachineRepairsItsNode: a Ready machine, which re-checks only cheaply, still notices on
// its next reconcile what a user or a fault changed in its workload cluster, as before: a deleted
// static pod (created again), a removed etcd member (added again), a deleted Node (registered
// again, with the same provider ID and IP, and its owner's UID).
func TestReadyMachineRepairsItsNode(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	h := newHarness(t)
	f := newFixture(t, newNamespace(t), "mend", nil)
	h.provisionCluster(t, f)
	_, cp := newMachine(t, f, "mend-cp-0", machineOpts{controlPlane: true})
	h.reconcileUntilReady(t, cp)
	key := mux.ClusterKey(f.ns, "mend")
	cs := workloadClient(t, mustListener(t, h, f))

	g.Expect(cs.CoreV1().Pods(metav1.NamespaceSystem).Delete(ctx, "kube-scheduler-mend-cp-0",
		metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})).To(Succeed())
	g.Expect(h.mux.DeleteEtcdMember(key, "etcd-mend-cp-0")).To(Succeed())
	h.reconcileMachine(t, cp)
	expectControlPlanePods(t, cs, "mend-cp-0", internalIP(cp))
	g.Expect(h.mux.HasEtcdMember(key, "etcd-mend-cp-0")).To(BeTrue())

	g.Expect(cs.CoreV1().Nodes().Delete(ctx, "mend-cp-0", metav1.DeleteOptions{})).To(Succeed())
	h.reconcileMachine(t, cp)
	get(t, cp)
	g.Expect(cp.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason))
	expectKubeadmNode(t, cs, "mend-cp-0", cp.Spec.ProviderID, internalIP(cp), true)
	node, err := cs.CoreV1().Nodes().Get(ctx, "mend-cp-0", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(node.Annotations).To(HaveKeyWithValue(MachineUIDAnnotation, string(cp.UID)))
}

// TestUpgradeAdoptsNameKeyedState: a cluster an earlier Goofy provisioned, which kept its records
// under the machines' names (node IPs allocated by name, Nodes without their owner's UID), keeps
// its node IPs, Nodes and etcd members (same IDs, same leader) across the upgrade and restart: the
// node unit adopts what it finds under the name (the Node of that name, the IP the GoofyMachine
// recorded, the etcd member of that name) for the GoofyMachine's UID, and hands a new machine an
// IP none of them holds.
func TestUpgradeAdoptsNameKeyedState(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	h := newDurableHarness(t, ns)
	f := newFixture(t, ns, "upgr", nil)
	h.provisionCluster(t, f)
	_, cp := newMachine(t, f, "upgr-cp-0", machineOpts{controlPlane: true})
	h.reconcileUntilReady(t, cp)
	setClusterStatus(t, f, true)
	_, w := newMachine(t, f, "upgr-md-0", machineOpts{})
	h.reconcileUntilReady(t, w)
	key := mux.ClusterKey(ns, "upgr")
	before := snapshot(t, f, mustListener(t, h.harness, f), "upgr-cp-0")

	// What an earlier version left: Nodes found under the Machines' names that carry no owner UID
	// (its allocations, under the names, were in its memory and went with its process).
	wc, err := mustListener(t, h.harness, f).GetClient()
	g.Expect(err).NotTo(HaveOccurred())
	for _, name := range []string{"upgr-cp-0", "upgr-md-0"} {
		node := &corev1.Node{}
		g.Expect(wc.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
		delete(node.Annotations, MachineUIDAnnotation)
		g.Expect(wc.Update(ctx, node)).To(Succeed())
	}
	h.restart(t)
	nodes := h.machineR.env().nodes

	h.reconcileCluster(t, f.gc)
	for _, gm := range []*infrav1.GoofyMachine{cp, w} {
		g.Expect(h.reconcileMachine(t, gm)).To(Equal(ctrl.Result{}), gm.Name)
		get(t, gm)
		g.Expect(gm.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason), gm.Name)
	}
	l := mustListener(t, h.harness, f)
	g.Expect(snapshot(t, f, l, "upgr-cp-0")).To(Equal(before), "same Nodes, IPs, etcd member IDs and leader")
	wc, err = l.GetClient()
	g.Expect(err).NotTo(HaveOccurred())
	for _, gm := range []*infrav1.GoofyMachine{cp, w} {
		node := &corev1.Node{}
		g.Expect(wc.Get(ctx, client.ObjectKey{Name: gm.Name}, node)).To(Succeed())
		g.Expect(node.Annotations).To(HaveKeyWithValue(MachineUIDAnnotation, string(gm.UID)), gm.Name)
	}
	// The allocations are the UIDs' now; nothing is left under a name.
	g.Expect(nodes.ips.clusters[key]).To(Equal(map[netip.Addr]string{
		netip.MustParseAddr(internalIP(cp)): string(cp.UID),
		netip.MustParseAddr(internalIP(w)):  string(w.UID),
	}))

	// A machine added after the upgrade gets a free IP.
	_, w2 := newMachine(t, f, "upgr-md-1", machineOpts{})
	h.reconcileUntilReady(t, w2)
	g.Expect(internalIP(w2)).NotTo(BeElementOf(internalIP(cp), internalIP(w)))
}

// TestNodeRecordsKeyedByUID: the node unit's records belong to the owner's UID, not to the name
// its Node has: a GoofyMachine re-created under the same name (another UID) is another owner and
// does not inherit the IP of the one it replaces while that one holds it; releasing goes by UID.
func TestNodeRecordsKeyedByUID(t *testing.T) {
	g := NewWithT(t)
	p := newNodeProvisioner(nil, nil, nil)
	none := func() (map[netip.Addr]bool, error) { return nil, nil }
	old := simNode{owner: "uid-old", key: "ns/c", name: "m-0"}
	again := simNode{owner: "uid-new", key: "ns/c", name: "m-0"}
	ip, err := p.nodeIP(old, "", none)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.nodeIP(old, "", none)).To(Equal(ip), "stable for its owner")
	other, err := p.nodeIP(again, "", none)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(other).NotTo(Equal(ip))
	_, err = p.nodeIP(again, ip.String(), none)
	g.Expect(err).To(MatchError(ContainSubstring("already used by machine uid-old")))
	p.release(old)
	g.Expect(p.ips.clusters["ns/c"]).To(Equal(map[netip.Addr]string{other: "uid-new"}))
	p.release(again)
	g.Expect(p.ips.clusters).NotTo(HaveKey("ns/c"))
}

// TestCreateWithStatusSurvivesAConcurrentPatch: CAPI's Machine controller patches a new Node
// (annotations, the uninitialized taint) between its create and the kubelet-like status write.
// The status still lands on the latest version, CAPI's change stays, and the phase does not fail
// (a failed phase costs a GoofyMachine status write and, mirrored, a Machine one).
func TestCreateWithStatusSurvivesAConcurrentPatch(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	base := fake.NewClientBuilder().WithScheme(testScheme).WithStatusSubresource(&corev1.Node{}).Build()
	statusWrites := 0
	c := interceptor.NewClient(base, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			statusWrites++
			if statusWrites == 1 {
				capi := &corev1.Node{}
				if err := cl.Get(ctx, client.ObjectKeyFromObject(obj), capi); err != nil {
					return err
				}
				capi.Annotations = map[string]string{"cluster.x-k8s.io/machine": "m-0"}
				capi.Spec.Taints = nil
				if err := cl.Update(ctx, capi); err != nil {
					return err
				}
			}
			return cl.SubResource(sub).Update(ctx, obj, opts...)
		},
	})

	node := workload.Node(workload.NodeSpec{Name: "n-0", ProviderID: "goofy://ns/c/n-0", InternalIP: "10.0.0.5", Ready: true}, metav1.Now())
	g.Expect(createWithStatus(ctx, c, node)).To(Succeed())

	got := &corev1.Node{}
	g.Expect(base.Get(ctx, client.ObjectKey{Name: "n-0"}, got)).To(Succeed())
	g.Expect(statusWrites).To(Equal(2), "one conflict, one write on the latest version")
	g.Expect(got.Annotations).To(HaveKeyWithValue("cluster.x-k8s.io/machine", "m-0"), "CAPI's change is kept")
	g.Expect(got.Spec.Taints).To(BeEmpty())
	g.Expect(got.Status.Addresses).To(ContainElement(corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.0.5"}))
	g.Expect(got.Status.Conditions).To(ContainElement(And(
		HaveField("Type", corev1.NodeReady), HaveField("Status", corev1.ConditionTrue))))
}
