package controllers

import (
	"context"
	"sort"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// reconcileThroughPhases reconciles a machine, moving the fake clock to each requeue time, until Ready.
func (h *harness) reconcileThroughPhases(t testing.TB, gm *infrav1.GoofyMachine) {
	t.Helper()
	for i := 0; i < 20; i++ {
		res := h.reconcileMachine(t, gm)
		get(t, gm)
		if c := condition(gm, infrav1.ReadyCondition); c != nil && c.Status == metav1.ConditionTrue {
			return
		}
		h.clock.Step(res.RequeueAfter)
	}
	t.Fatalf("GoofyMachine %s not Ready: %+v", gm.Name, gm.Status.Conditions)
}

// clusterSnapshot is what clients of a workload cluster see of its machines.
type clusterSnapshot struct {
	Nodes   []string // name providerID internalIP kubeletVersion ready
	Members map[string]uint64
	Leader  string
}

func snapshot(t testing.TB, f *fixture, l *mux.WorkloadClusterListener, etcdVia string) clusterSnapshot {
	t.Helper()
	nodes, err := workloadClient(t, l).CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var s clusterSnapshot
	for _, n := range nodes.Items {
		var ip, ready string
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				ip = a.Address
			}
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				ready = string(c.Status)
			}
		}
		s.Nodes = append(s.Nodes, n.Name+" "+n.Spec.ProviderID+" "+ip+" "+n.Status.NodeInfo.KubeletVersion+" "+ready)
	}
	sort.Strings(s.Nodes)
	c := etcdClient(t, f, l, etcdVia)
	members, err := c.Members(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s.Members = map[string]uint64{}
	for _, m := range members {
		s.Members[m.Name] = m.ID
		if m.ID == c.LeaderID {
			s.Leader = m.Name
		}
	}
	return s
}

// TestRestart throws the whole "process" away (store manager, mux, reconcilers) after a cluster
// with one control-plane machine and one worker is provisioned, and builds a new one: HotRestart
// puts the listener back on its port before any reconcile (a cluster created meanwhile cannot take
// it), and one reconcile per object rebuilds the same workload cluster — same nodes, provider IDs,
// IPs and etcd member IDs — without waiting for the phases again.
func TestRestart(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	h := newHarness(t)
	ns := newNamespace(t)
	f := newFixture(t, ns, "rst", nil)
	h.provisionCluster(t, f)
	slow := &infrav1.InMemoryMachineBackend{VM: phaseOf(30*time.Second, "0.2"), Node: phaseOf(20*time.Second, "0.2"),
		Etcd: phaseOf(10*time.Second, ""), APIServer: phaseOf(10*time.Second, "")}
	_, cp := newMachine(t, f, "rst-cp-0", machineOpts{controlPlane: true, backend: slow})
	h.reconcileThroughPhases(t, cp)
	setClusterStatus(t, f, true)
	_, worker := newMachine(t, f, "rst-md-0", machineOpts{backend: slow})
	h.reconcileThroughPhases(t, worker)

	key := mux.ClusterKey(ns, "rst")
	l := mustListener(t, h, f)
	port := l.Port()
	before := snapshot(t, f, l, "rst-cp-0")
	g.Expect(before.Nodes).To(HaveLen(2))
	g.Expect(before.Members).To(HaveLen(1))

	// The process dies: listeners and in-memory stores are gone.
	g.Expect(h.mux.Shutdown(ctx)).To(Succeed())

	stores := store.NewManager()
	m, err := mux.NewWorkloadClustersMux(stores, "127.0.0.1", mux.WithPortRange(testPortMin, testPortMax))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	restarter := &HotRestarter{Reader: k8sClient, Mux: m, Namespace: ns}
	h2 := &harness{stores: stores, mux: m, clock: h.clock,
		clusterR: &GoofyClusterReconciler{Client: k8sClient, Mux: m, Restarter: restarter},
		machineR: &GoofyMachineReconciler{Client: k8sClient, Mux: m, Restarter: restarter, Clock: h.clock}}

	// Readiness: a standby is ready; the leader is not until the listeners are back.
	elected := make(chan struct{})
	ready := restarter.ReadyzCheck(elected)
	g.Expect(ready(nil)).To(Succeed())
	close(elected)
	g.Expect(ready(nil)).To(MatchError(ContainSubstring("restoring workload cluster listeners")))

	// Reconciles wait for the restart.
	waitCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = h2.clusterR.Reconcile(waitCtx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f.gc)})
	cancel()
	g.Expect(err).To(MatchError(context.DeadlineExceeded))

	g.Expect(restarter.Start(ctx)).To(Succeed())
	g.Expect(ready(nil)).To(Succeed())
	l2, ok := m.Listener(key)
	g.Expect(ok).To(BeTrue())
	g.Expect(l2.Port()).To(Equal(port))

	// A cluster created after the restart gets another port.
	f2 := newFixture(t, ns, "rst-new", nil)
	h2.provisionCluster(t, f2)
	g.Expect(f2.gc.Spec.ControlPlaneEndpoint.Port).NotTo(BeEquivalentTo(port))

	// One reconcile each, no requeue: the machines were provisioned already.
	g.Expect(h2.reconcileCluster(t, f.gc)).To(Equal(ctrl.Result{}))
	get(t, f.gc)
	g.Expect(f.gc.Spec.ControlPlaneEndpoint.Port).To(BeEquivalentTo(port))
	for _, gm := range []*infrav1.GoofyMachine{cp, worker} {
		g.Expect(h2.reconcileMachine(t, gm)).To(Equal(ctrl.Result{}), gm.Name)
		get(t, gm)
		g.Expect(gm.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason), gm.Name)
	}
	after := snapshot(t, f, l2, "rst-cp-0")
	g.Expect(after).To(Equal(before))

	// A machine added after the restart does not get an IP already in use.
	_, w2 := newMachine(t, f, "rst-md-1", machineOpts{})
	h2.reconcileUntilReady(t, w2)
	g.Expect(internalIP(w2)).NotTo(BeElementOf(internalIP(cp), internalIP(worker)))
	g.Expect(ptr.Deref(w2.Status.Initialization.Provisioned, false)).To(BeTrue())
}
