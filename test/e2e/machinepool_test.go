package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/test/e2e/harness"
)

// mpCluster is the machine-pool scenario's cluster. It stays for the restart (which checks that its
// instances' Machines and Nodes survive a SIGKILL of the manager) and is deleted by TestDelete.
const mpCluster = "mp"

// Machine pools: the machinepool flavor, rendered by the real `clusterctl generate cluster
// --flavor machinepool`, reaches Available through CAPI's MachinePool controller with MachinePool
// Machines (one Machine per GoofyMachinePool instance) and CABPK's KubeadmConfig for MachinePools;
// the pool scales up and down, a Machine marked cluster.x-k8s.io/delete-machine is the one a
// scale-down removes, every instance's Node is Ready with exactly the provider ID the
// MachinePool lists, and a Kubernetes version bump of the MachinePool replaces every instance.
func TestMachinePool(t *testing.T) {
	ctx, g := begin(t, 12*time.Minute)
	if err := plane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: mpCluster}, &clusterv1.Cluster{}); apierrors.IsNotFound(err) {
		_, err := plane.Apply(ctx, generateCluster(ctx, t, g, mpCluster, "machinepool", "1", "3"))
		g.Expect(err).NotTo(HaveOccurred())
	}
	waitFor(ctx, t, g, mpCluster, 5*time.Minute, "Available", harness.Available)
	mp := waitPoolRunning(ctx, t, g, 3)

	scalePool(ctx, g, mp, 10)
	mp = waitPoolRunning(ctx, t, g, 10)

	// A scale-down removes the Machine marked for deletion first, whatever its age.
	machines := poolMachines(ctx, g)
	chosen := machines[len(machines)/2]
	patch := client.MergeFrom(chosen.DeepCopy())
	chosen.Annotations = map[string]string{clusterv1.DeleteMachineAnnotation: "yes"}
	g.Expect(plane.Client.Patch(ctx, &chosen, patch)).To(Succeed())
	scalePool(ctx, g, mp, 9)
	mp = waitPoolRunning(ctx, t, g, 9)
	for _, m := range poolMachines(ctx, g) {
		g.Expect(m.Name).NotTo(Equal(chosen.Name), "the Machine marked %s is still there", clusterv1.DeleteMachineAnnotation)
	}

	scalePool(ctx, g, mp, 2)
	mp = waitPoolRunning(ctx, t, g, 2)

	rollPool(ctx, t, g, mp)
}

// rollPool bumps the MachinePool's Kubernetes version (the next patch release) and waits until
// the GoofyMachinePool has replaced every instance: new Machines only, every worker Node on the
// new kubelet version, the MachinePool Running with all replicas ready, RollingOut False. The
// pool's maxSurge is 100% first, so that the whole pool rolls in one round (new instances, then
// the old ones' Machines deleted and drained). A Deployment under a PodDisruptionBudget runs on
// the old instances: CAPI's drain of their Machines evicts its pods one at a time (the second
// eviction is refused until the first pod's replacement is ready on a new instance), and the
// budget holds throughout.
func rollPool(ctx context.Context, t *testing.T, g Gomega, mp *clusterv1.MachinePool) {
	t.Helper()
	replicas := ptr.Deref(mp.Spec.Replicas, 1)
	old := map[string]bool{}
	for _, m := range poolMachines(ctx, g) {
		old[m.Name] = true
	}
	pool := &infrav1.GoofyMachinePool{}
	g.Expect(plane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: mpCluster + "-mp-0"}, pool)).To(Succeed())
	patch := client.MergeFrom(pool.DeepCopy())
	pool.Spec.Strategy.RollingUpdate = &infrav1.MachinePoolRollingUpdate{MaxSurge: ptr.To(intstr.FromString("100%"))}
	g.Expect(plane.Client.Patch(ctx, pool, patch)).To(Succeed())
	budgeted := startBudgetedWorkload(ctx, t, g, workloadREST(ctx, g, mpCluster), onReplacedWorkers)

	from := mp.Spec.Template.Spec.Version
	v := version.MustParseSemantic(from)
	to := fmt.Sprintf("v%d.%d.%d", v.Major(), v.Minor(), v.Patch()+1)
	mpPatch := client.MergeFrom(mp.DeepCopy())
	mp.Spec.Template.Spec.Version = to
	g.Expect(plane.Client.Patch(ctx, mp, mpPatch)).To(Succeed(), "bump the MachinePool to %s", to)
	start := time.Now()
	g.Eventually(func(g Gomega) {
		// Every instance is a new one with the new version (the pool's status alone may still
		// be the one from before the bump)...
		var instances infrav1.GoofyMachineList
		g.Expect(plane.Client.List(ctx, &instances, client.InNamespace(ns),
			client.MatchingLabels{infrav1.MachinePoolInstanceLabel: pool.Name})).To(Succeed())
		g.Expect(instances.Items).To(HaveLen(int(replicas)), "instances")
		for _, gm := range instances.Items {
			g.Expect(old).NotTo(HaveKey(gm.Name), "instance %s is an old one", gm.Name)
			g.Expect(gm.Annotations).To(HaveKeyWithValue(infrav1.InstanceKubernetesVersionAnnotation, to), gm.Name)
		}
		// ...and the pool says it is done.
		g.Expect(plane.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool)).To(Succeed())
		g.Expect(pool.Status.UpToDateReplicas).To(Equal(ptr.To(replicas)), "up-to-date instances")
		g.Expect(pool.Status.Replicas).To(Equal(ptr.To(replicas)), "instances (the old ones gone)")
		rolling := conditions.Get(pool, infrav1.RollingOutCondition)
		g.Expect(rolling).NotTo(BeNil())
		g.Expect(rolling.Reason).To(Equal(infrav1.NotRollingOutReason), rolling.Message)
	}, 5*time.Minute, time.Second).Should(Succeed(), "the GoofyMachinePool rolled to %s", to)
	waitPoolRunning(ctx, t, g, replicas)
	t.Logf("MachinePool rolled from %s to %s in %.0fs", from, to, time.Since(start).Seconds())
	for _, m := range poolMachines(ctx, g) {
		g.Expect(old).NotTo(HaveKey(m.Name), "Machine %s of an old instance is still there", m.Name)
	}
	var workers int32
	for _, node := range readyNodes(ctx, g, mpCluster) {
		if _, cp := node.Labels["node-role.kubernetes.io/control-plane"]; cp {
			continue
		}
		workers++
		g.Expect(old).NotTo(HaveKey(node.Name), "Node %s of an old instance is still there", node.Name)
		g.Expect(node.Status.NodeInfo.KubeletVersion).To(Equal(to), "kubelet version of Node %s", node.Name)
	}
	g.Expect(workers).To(Equal(replicas), "Ready worker Nodes")
	budgeted.check(ctx, g)
}

// waitPoolRunning waits until the MachinePool is Running with n ready replicas, n Machines, and
// n Ready Nodes carrying exactly the provider IDs its GoofyMachinePool lists.
func waitPoolRunning(ctx context.Context, t *testing.T, g Gomega, n int32) *clusterv1.MachinePool {
	t.Helper()
	mp := &clusterv1.MachinePool{}
	start := time.Now()
	g.Eventually(func(g Gomega) {
		g.Expect(plane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: mpCluster + "-mp-0"}, mp)).To(Succeed())
		g.Expect(mp.Status.Phase).To(Equal(string(clusterv1.MachinePoolPhaseRunning)))
		g.Expect(mp.Status.ReadyReplicas).To(Equal(ptr.To(n)), "ready replicas")
		g.Expect(mp.Status.Replicas).To(Equal(ptr.To(n)), "replicas")
		machines := poolMachines(ctx, g)
		g.Expect(machines).To(HaveLen(int(n)), "Machines of the pool")
		for _, m := range machines {
			g.Expect(m.Status.Phase).To(Equal(string(clusterv1.MachinePhaseRunning)), m.Name)
		}
		pool := &infrav1.GoofyMachinePool{}
		g.Expect(plane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: mpCluster + "-mp-0"}, pool)).To(Succeed())
		g.Expect(pool.Spec.ProviderIDList).To(HaveLen(int(n)))
		g.Expect(mp.Spec.ProviderIDList).To(ConsistOf(pool.Spec.ProviderIDList), "the MachinePool's provider IDs")
		var workers []string
		for _, node := range readyNodes(ctx, g, mpCluster) {
			if _, cp := node.Labels["node-role.kubernetes.io/control-plane"]; !cp {
				workers = append(workers, node.Spec.ProviderID)
			}
		}
		g.Expect(workers).To(ConsistOf(pool.Spec.ProviderIDList), "Ready worker Nodes' provider IDs")
	}, 5*time.Minute, time.Second).Should(Succeed(), "MachinePool with %d ready replicas", n)
	t.Logf("MachinePool Running with %d ready replicas after %.0fs", n, time.Since(start).Seconds())
	return mp
}

// poolMachines are the Machines CAPI made for the pool's instances, not being deleted, oldest first.
func poolMachines(ctx context.Context, g Gomega) []clusterv1.Machine {
	var list clusterv1.MachineList
	g.Expect(plane.Client.List(ctx, &list, client.InNamespace(ns),
		client.MatchingLabels{clusterv1.ClusterNameLabel: mpCluster, clusterv1.MachinePoolNameLabel: mpCluster + "-mp-0"})).To(Succeed())
	out := slices.DeleteFunc(list.Items, func(m clusterv1.Machine) bool { return m.DeletionTimestamp != nil })
	slices.SortFunc(out, func(a, b clusterv1.Machine) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	return out
}

func scalePool(ctx context.Context, g Gomega, mp *clusterv1.MachinePool, n int32) {
	patch := client.MergeFrom(mp.DeepCopy())
	mp.Spec.Replicas = ptr.To(n)
	g.Expect(plane.Client.Patch(ctx, mp, patch)).To(Succeed(), fmt.Sprintf("scale the MachinePool to %d", n))
}

// deleteMachinePoolCluster deletes the machine-pool scenario's cluster and checks that nothing of it
// is left: no Machine, GoofyMachine (instance), GoofyMachinePool or MachinePool, and no listener.
func deleteMachinePoolCluster(ctx context.Context, g Gomega) {
	c := &clusterv1.Cluster{}
	if err := plane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: mpCluster}, c); apierrors.IsNotFound(err) {
		return
	}
	ep := c.Spec.ControlPlaneEndpoint
	g.Expect(plane.Client.Delete(ctx, c)).To(Succeed())
	byCluster := client.MatchingLabels{clusterv1.ClusterNameLabel: mpCluster}
	g.Eventually(func(g Gomega) {
		err := plane.Client.Get(ctx, client.ObjectKeyFromObject(c), &clusterv1.Cluster{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "cluster still there")
		var machines clusterv1.MachineList
		g.Expect(plane.Client.List(ctx, &machines, client.InNamespace(ns), byCluster)).To(Succeed())
		g.Expect(machines.Items).To(BeEmpty())
		var gms infrav1.GoofyMachineList
		g.Expect(plane.Client.List(ctx, &gms, client.InNamespace(ns), byCluster)).To(Succeed())
		g.Expect(gms.Items).To(BeEmpty())
		var pools infrav1.GoofyMachinePoolList
		g.Expect(plane.Client.List(ctx, &pools, client.InNamespace(ns))).To(Succeed())
		g.Expect(slices.ContainsFunc(pools.Items, func(p infrav1.GoofyMachinePool) bool { return p.Name == mpCluster+"-mp-0" })).To(BeFalse(), "GoofyMachinePool left")
		var mps clusterv1.MachinePoolList
		g.Expect(plane.Client.List(ctx, &mps, client.InNamespace(ns), byCluster)).To(Succeed())
		g.Expect(mps.Items).To(BeEmpty())
	}, 5*time.Minute, 2*time.Second).Should(Succeed())
	g.Expect(dial(ep)).NotTo(Succeed(), "the listener of the deleted machine-pool cluster still accepts connections")
}
