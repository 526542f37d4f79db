package controllers

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
)

func faultGauge(kind string) float64 { return testutil.ToFloat64(faultsActive.WithLabelValues(kind)) }

func drain(rec *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// faultedCluster is a provisioned cluster with one Ready control-plane machine, and the event
// recorder of both reconcilers.
func faultedCluster(t *testing.T, name string) (*harness, *events.FakeRecorder, *fixture, *infrav1.GoofyMachine) {
	t.Helper()
	h := newHarness(t)
	rec := events.NewFakeRecorder(20)
	h.clusterR.recorder, h.machineR.recorder = rec, rec
	f := newFixture(t, newNamespace(t), name, nil)
	h.provisionCluster(t, f)
	_, gm := newMachine(t, f, name+"-cp-0", machineOpts{controlPlane: true})
	h.reconcileUntilReady(t, gm)
	return h, rec, f, gm
}

// TestClusterFaultsInjected: spec.simulation of a GoofyCluster reaches its listener (unreachable
// closes it, removal serves it again), shows in the FaultsInjected condition, in events and in
// goofy_faults_active, and a fault with until ends by itself at the requeue the reconcile asks for.
func TestClusterFaultsInjected(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	h, rec, f, gm := faultedCluster(t, "chaos")
	g.Expect(conditions.Get(f.gc, infrav1.FaultsInjectedCondition)).To(BeNil(), "no condition on a cluster that never had a fault")
	addr := mustListener(t, h, f).HostPort()
	dial := func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err
	}
	g.Expect(dial()).To(Succeed())
	unreachableBefore, latencyBefore := faultGauge(mux.KindUnreachable), faultGauge(mux.KindAPIServerLatency)

	get(t, f.gc)
	until := metav1.NewTime(time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second))
	f.gc.Spec.Simulation = &infrav1.ClusterSimulation{
		Unreachable: true,
		APIServer:   &infrav1.APIServerSimulation{Latency: &infrav1.LatencyFault{Base: metav1.Duration{Duration: 100 * time.Millisecond}, Until: &until}},
	}
	g.Expect(k8sClient.Update(ctx, f.gc)).To(Succeed())
	reconciled := time.Now() // the requeue is asked for after this: at most until-reconciled (+100ms) away
	res := h.reconcileCluster(t, f.gc)
	g.Expect(res.RequeueAfter).To(And(BeNumerically(">", 0), BeNumerically("<=", until.Sub(reconciled)+101*time.Millisecond)))
	get(t, f.gc)
	g.Expect(f.gc.Status.Conditions).To(haveCondition(infrav1.FaultsInjectedCondition, metav1.ConditionTrue, infrav1.FaultsActiveReason))
	g.Expect(conditions.Get(f.gc, infrav1.FaultsInjectedCondition).Message).To(Equal("unreachable; apiServer.latency 100ms"))
	g.Expect(conditions.IsTrue(f.gc, infrav1.ReadyCondition)).To(BeTrue(), "the infrastructure stays provisioned")
	g.Expect(dial()).NotTo(Succeed(), "the listener still accepts connections")
	g.Expect(faultGauge(mux.KindUnreachable)).To(Equal(unreachableBefore + 1))
	g.Expect(faultGauge(mux.KindAPIServerLatency)).To(Equal(latencyBefore + 1))
	g.Expect(drain(rec)).To(ConsistOf(ContainSubstring("FaultsInjected")))
	// A resync changes nothing and emits nothing.
	h.reconcileCluster(t, f.gc)
	g.Expect(drain(rec)).To(BeEmpty())
	// The machine keeps reconciling while its cluster is unreachable.
	h.reconcileMachine(t, gm)

	// The latency ends by itself: the reconcile at the requested time drops it.
	time.Sleep(time.Until(until.Time) + 100*time.Millisecond)
	h.reconcileCluster(t, f.gc)
	get(t, f.gc)
	g.Expect(conditions.Get(f.gc, infrav1.FaultsInjectedCondition).Message).To(Equal("unreachable"))
	g.Expect(faultGauge(mux.KindAPIServerLatency)).To(Equal(latencyBefore))

	// Removing the fault serves the same cluster again.
	f.gc.Spec.Simulation = nil
	g.Expect(k8sClient.Update(ctx, f.gc)).To(Succeed())
	res = h.reconcileCluster(t, f.gc)
	g.Expect(res.RequeueAfter).To(BeZero())
	get(t, f.gc)
	g.Expect(f.gc.Status.Conditions).To(haveCondition(infrav1.FaultsInjectedCondition, metav1.ConditionFalse, infrav1.NoFaultsReason))
	g.Expect(dial()).To(Succeed())
	_, err := workloadClient(t, mustListener(t, h, f)).CoreV1().Nodes().Get(ctx, "chaos-cp-0", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "the Node is still there")
	g.Expect(faultGauge(mux.KindUnreachable)).To(Equal(unreachableBefore))
	evs := drain(rec)
	g.Expect(evs).To(ContainElement(ContainSubstring("FaultsCleared")))

	// Deleting the cluster forgets its faults.
	get(t, f.gc)
	f.gc.Spec.Simulation = &infrav1.ClusterSimulation{Etcd: &infrav1.EtcdSimulation{Leaderless: true}}
	g.Expect(k8sClient.Update(ctx, f.gc)).To(Succeed())
	h.reconcileCluster(t, f.gc)
	leaderless := faultGauge(mux.KindEtcdLeaderless)
	g.Expect(k8sClient.Delete(ctx, f.gc)).To(Succeed())
	h.reconcileCluster(t, f.gc)
	g.Expect(faultGauge(mux.KindEtcdLeaderless)).To(Equal(leaderless - 1))
}

// TestMachineFaultsInjected: nodeNotReady, etcdMemberUnhealthy and vmFailed of a GoofyMachine, and
// the deprecated annotation, change its Node, its etcd pod and its conditions, and clear again.
func TestMachineFaultsInjected(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	h, rec, f, gm := faultedCluster(t, "sickly")
	wc, err := mustListener(t, h, f).GetClient()
	g.Expect(err).NotTo(HaveOccurred())
	nodeReady := func() corev1.ConditionStatus {
		node := &corev1.Node{}
		g.Expect(wc.Get(ctx, client.ObjectKey{Name: "sickly-cp-0"}, node)).To(Succeed())
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status
			}
		}
		return ""
	}
	etcdPodReady := func() corev1.ConditionStatus {
		pod := &corev1.Pod{}
		g.Expect(wc.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "etcd-sickly-cp-0"}, pod)).To(Succeed())
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status
			}
		}
		return ""
	}
	setSim := func(sim *infrav1.MachineSimulation) {
		get(t, gm)
		gm.Spec.Simulation = sim
		g.Expect(k8sClient.Update(ctx, gm)).To(Succeed())
		h.reconcileMachine(t, gm)
		get(t, gm)
	}
	g.Expect(nodeReady()).To(Equal(corev1.ConditionTrue))
	g.Expect(etcdPodReady()).To(Equal(corev1.ConditionTrue))

	setSim(&infrav1.MachineSimulation{NodeNotReady: true})
	g.Expect(nodeReady()).To(Equal(corev1.ConditionFalse))
	g.Expect(conditions.Get(gm, infrav1.FaultsInjectedCondition).Message).To(Equal("nodeNotReady"))
	g.Expect(conditions.IsTrue(gm, infrav1.ReadyCondition)).To(BeTrue(), "the VM still runs")

	setSim(&infrav1.MachineSimulation{EtcdMemberUnhealthy: true})
	g.Expect(nodeReady()).To(Equal(corev1.ConditionTrue))
	g.Expect(etcdPodReady()).To(Equal(corev1.ConditionFalse))
	g.Expect(conditions.Get(gm, infrav1.FaultsInjectedCondition).Message).To(Equal("etcdMemberUnhealthy"))

	unhealthyGauge, vmGauge := faultGauge(mux.KindEtcdMemberUnhealthy), faultGauge(mux.KindVMFailed)
	setSim(&infrav1.MachineSimulation{VMFailed: true})
	g.Expect(nodeReady()).To(Equal(corev1.ConditionUnknown), "nobody posts the Node's status")
	g.Expect(etcdPodReady()).To(Equal(corev1.ConditionFalse))
	g.Expect(gm.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.VMFailedReason))
	g.Expect(faultGauge(mux.KindVMFailed)).To(Equal(vmGauge + 1))
	g.Expect(faultGauge(mux.KindEtcdMemberUnhealthy)).To(Equal(unhealthyGauge - 1))

	// Until in the past: no fault.
	past := metav1.NewTime(h.clock.Now().Add(-time.Minute))
	setSim(&infrav1.MachineSimulation{VMFailed: true, VMFailedUntil: &past})
	g.Expect(nodeReady()).To(Equal(corev1.ConditionTrue))
	g.Expect(etcdPodReady()).To(Equal(corev1.ConditionTrue))
	g.Expect(conditions.IsTrue(gm, infrav1.ReadyCondition)).To(BeTrue())
	g.Expect(gm.Status.Conditions).To(haveCondition(infrav1.FaultsInjectedCondition, metav1.ConditionFalse, infrav1.NoFaultsReason))

	// An until ahead asks for a reconcile then (the fake clock drives the machine reconciler).
	later := metav1.NewTime(h.clock.Now().Add(30 * time.Second))
	setSim(&infrav1.MachineSimulation{NodeNotReady: true, NodeNotReadyUntil: &later})
	res := h.reconcileMachine(t, gm)
	g.Expect(res.RequeueAfter).To(BeNumerically("~", 30*time.Second, time.Second))
	g.Expect(nodeReady()).To(Equal(corev1.ConditionFalse))
	h.clock.Step(31 * time.Second)
	h.reconcileMachine(t, gm)
	g.Expect(nodeReady()).To(Equal(corev1.ConditionTrue))

	// The deprecated annotation is an alias of nodeNotReady.
	get(t, gm)
	gm.Spec.Simulation = nil
	gm.Annotations = map[string]string{NodeNotReadyAnnotation: "true"}
	g.Expect(k8sClient.Update(ctx, gm)).To(Succeed())
	h.reconcileMachine(t, gm)
	get(t, gm)
	g.Expect(nodeReady()).To(Equal(corev1.ConditionFalse))
	g.Expect(conditions.Get(gm, infrav1.FaultsInjectedCondition).Message).To(ContainSubstring("deprecated annotation"))

	var injected int
	for _, e := range drain(rec) {
		if strings.Contains(e, "FaultsInjected") {
			injected++
		}
	}
	g.Expect(injected).To(BeNumerically(">=", 4))
}

// TestVMFailedBeforeProvisioning: a machine made from a template with vmFailed never gets a VM.
func TestVMFailedBeforeProvisioning(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	h := newHarness(t)
	f := newFixture(t, newNamespace(t), "doa", nil)
	h.provisionCluster(t, f)
	_, gm := newMachine(t, f, "doa-cp-0", machineOpts{controlPlane: true})
	gm.Spec.Simulation = &infrav1.MachineSimulation{VMFailed: true}
	g.Expect(k8sClient.Update(ctx, gm)).To(Succeed())
	h.reconcileMachine(t, gm)
	get(t, gm)
	g.Expect(gm.Status.Conditions).To(haveCondition(infrav1.VMProvisionedCondition, metav1.ConditionFalse, infrav1.VMFailedReason))
	g.Expect(gm.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.VMFailedReason))
	g.Expect(gm.Spec.ProviderID).To(BeEmpty())
}
