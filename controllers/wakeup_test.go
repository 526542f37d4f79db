package controllers

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
)

// These tests run the reconcilers in a manager with controller-runtime's default sync period
// (10 h) unless they set one: a waiting machine returns without a requeue, so only a watch event
// can move it on. Each test first lets the machine reach its wait, then makes one change, the
// one CAPI would make, and expects the machine to move on.

// wakeTimeout bounds how long an event takes to reach a waiting machine: well below any requeue
// or resync the machine could otherwise be rescued by.
const wakeTimeout = 10 * time.Second

// TestWorkerWakesWhenControlPlaneInitialized reproduces issue 18's lost wake-up. CAPI's patch
// helper writes a Cluster's conditions first (ControlPlaneInitialized turns True) and the rest of
// its status (status.initialization.controlPlaneInitialized) in a second request. A worker waiting
// for its control plane is reconciled after the first write; if that reconcile does not count the
// condition, the second write must wake it again, and the Cluster watch used to drop it (the
// condition was already True). Either write alone must end the wait.
func TestWorkerWakesWhenControlPlaneInitialized(t *testing.T) {
	requireEnv(t)
	ns := newNamespace(t)
	h := newHarness(t)
	startManager(t, h, ns, managerOptions{})

	initializedCondition := func(c *clusterv1.Cluster) {
		conditions.Set(c, metav1.Condition{Type: clusterv1.ClusterControlPlaneInitializedCondition,
			Status: metav1.ConditionTrue, Reason: clusterv1.ClusterControlPlaneInitializedReason})
	}
	initializedField := func(c *clusterv1.Cluster) {
		c.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	}
	for name, writes := range map[string][]func(*clusterv1.Cluster){
		"conditions, then status.initialization (CAPI's order)": {initializedCondition, initializedField},
		"conditions alone":            {initializedCondition},
		"status.initialization alone": {initializedField},
	} {
		t.Run(name, func(t *testing.T) {
			f := provisionedCluster(t, ns, false)
			_, gm := newMachine(t, f, f.cluster.Name+"-md-0", machineOpts{})
			awaitCondition(t, gm, infrav1.VMProvisionedCondition, metav1.ConditionUnknown, infrav1.WaitingForControlPlaneInitializedReason)
			for i, write := range writes {
				before := reconcileTotal(t, "goofymachine")
				updateClusterStatus(t, f, write)
				if i < len(writes)-1 {
					// The next write comes only after the worker was reconciled for this one,
					// which is when the wake-up used to get lost.
					awaitReconcile(t, before)
				}
			}
			awaitCondition(t, gm, infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason)
		})
	}
}

// TestWaitingMachinesWake: every other wait of a GoofyMachine ends with the watch event of the
// change it waits for: its owner reference, its Cluster's creation, the Cluster's infrastructure,
// the Machine's bootstrap data, the Cluster's unpausing.
func TestWaitingMachinesWake(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	ns := newNamespace(t)
	h := newHarness(t)
	startManager(t, h, ns, managerOptions{})

	t.Run("owner reference", func(t *testing.T) {
		g := NewWithT(t)
		f := provisionedCluster(t, ns, true)
		before := reconcileTotal(t, "goofymachine")
		machine, gm := newMachine(t, f, f.cluster.Name+"-md-0", machineOpts{noOwner: true})
		awaitReconcile(t, before)
		awaitIdle(t)
		get(t, gm)
		g.Expect(gm.Status.Conditions).To(BeEmpty())

		gm.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: machine.Name, UID: machine.UID,
		}}
		g.Expect(k8sClient.Update(ctx, gm)).To(Succeed())
		awaitCondition(t, gm, infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason)
	})

	t.Run("Cluster created after the machine", func(t *testing.T) {
		g := NewWithT(t)
		name := "wake-late"
		before := reconcileTotal(t, "goofymachine")
		_, gm := newMachine(t, &fixture{ns: ns, cluster: &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name}}},
			name+"-md-0", machineOpts{})
		awaitReconcile(t, before)
		awaitIdle(t)
		get(t, gm)
		g.Expect(gm.Status.Conditions).To(BeEmpty())

		newFixture(t, ns, name, nil)
		awaitCondition(t, gm, infrav1.VMProvisionedCondition, metav1.ConditionUnknown, infrav1.WaitingForClusterInfrastructureReason)
	})

	t.Run("Cluster infrastructure provisioned", func(t *testing.T) {
		f := newFixture(t, ns, "wake-infra", nil)
		awaitProvisioned(t, f)
		_, gm := newMachine(t, f, "wake-infra-cp-0", machineOpts{controlPlane: true})
		awaitCondition(t, gm, infrav1.VMProvisionedCondition, metav1.ConditionUnknown, infrav1.WaitingForClusterInfrastructureReason)

		setClusterStatus(t, f, false)
		awaitCondition(t, gm, infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason)
	})

	t.Run("bootstrap data", func(t *testing.T) {
		g := NewWithT(t)
		f := provisionedCluster(t, ns, true)
		machine, gm := newMachine(t, f, f.cluster.Name+"-md-0", machineOpts{noBootstrap: true})
		awaitCondition(t, gm, infrav1.VMProvisionedCondition, metav1.ConditionUnknown, infrav1.WaitingForBootstrapDataReason)

		get(t, machine)
		machine.Spec.Bootstrap.DataSecretName = ptr.To(machine.Name + "-bootstrap")
		g.Expect(k8sClient.Update(ctx, machine)).To(Succeed())
		awaitCondition(t, gm, infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason)
	})

	t.Run("Cluster unpaused", func(t *testing.T) {
		g := NewWithT(t)
		f := provisionedCluster(t, ns, true)
		get(t, f.cluster)
		f.cluster.Spec.Paused = ptr.To(true)
		g.Expect(k8sClient.Update(ctx, f.cluster)).To(Succeed())
		_, gm := newMachine(t, f, f.cluster.Name+"-md-0", machineOpts{})
		awaitCondition(t, gm, infrav1.PausedCondition, metav1.ConditionTrue, clusterv1.PausedReason)

		get(t, f.cluster)
		f.cluster.Spec.Paused = nil
		g.Expect(k8sClient.Update(ctx, f.cluster)).To(Succeed())
		awaitCondition(t, gm, infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason)
	})
}

// TestResyncReconcilesWaitingMachine: with a short sync period, an idle waiting machine is
// reconciled again without any event, so a wake-up lost for any reason costs at most one period.
// The reconcilers' client hides the Cluster's initialized control plane until the test reveals
// it, which sends no event: only the resync can tell the machine.
func TestResyncReconcilesWaitingMachine(t *testing.T) {
	requireEnv(t)
	ns := newNamespace(t)
	h := newHarness(t)
	var hide atomic.Bool
	hide.Store(true)
	startManager(t, h, ns, managerOptions{
		syncPeriod: 2 * time.Second,
		wrapClient: func(c client.Client) client.Client { return &controlPlaneHidingClient{Client: c, hide: &hide} },
	})

	f := provisionedCluster(t, ns, false)
	updateClusterStatus(t, f, func(c *clusterv1.Cluster) {
		c.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
		conditions.Set(c, metav1.Condition{Type: clusterv1.ClusterControlPlaneInitializedCondition,
			Status: metav1.ConditionTrue, Reason: clusterv1.ClusterControlPlaneInitializedReason})
	})
	_, gm := newMachine(t, f, f.cluster.Name+"-md-0", machineOpts{})
	awaitCondition(t, gm, infrav1.VMProvisionedCondition, metav1.ConditionUnknown, infrav1.WaitingForControlPlaneInitializedReason)

	hide.Store(false)
	awaitCondition(t, gm, infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason)
}

// controlPlaneHidingClient reads Clusters as if their control plane were not initialized while
// hide is set.
type controlPlaneHidingClient struct {
	client.Client
	hide *atomic.Bool
}

func (c *controlPlaneHidingClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := c.Client.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if cluster, ok := obj.(*clusterv1.Cluster); ok && c.hide.Load() {
		cluster.Status.Initialization.ControlPlaneInitialized = nil
		conditions.Delete(cluster, clusterv1.ClusterControlPlaneInitializedCondition)
	}
	return nil
}

var wakeClusters atomic.Int64

// provisionedCluster creates a cluster whose GoofyCluster the running manager provisions, then
// reports its infrastructure provisioned (and its control plane initialized) as CAPI would.
func provisionedCluster(t *testing.T, ns string, controlPlaneInitialized bool) *fixture {
	t.Helper()
	f := newFixture(t, ns, "wake-"+strconv.FormatInt(wakeClusters.Add(1), 10), nil)
	awaitProvisioned(t, f)
	setClusterStatus(t, f, controlPlaneInitialized)
	return f
}

// updateClusterStatus writes change to the status of f's Cluster.
func updateClusterStatus(t testing.TB, f *fixture, change func(*clusterv1.Cluster)) {
	t.Helper()
	get(t, f.cluster)
	change(f.cluster)
	if err := k8sClient.Status().Update(context.Background(), f.cluster); err != nil {
		t.Fatal(err)
	}
}

// awaitCondition waits until obj (a GoofyMachine or GoofyCluster) has the condition, within
// wakeTimeout.
func awaitCondition(t testing.TB, obj pausable, condType string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	NewWithT(t).Eventually(func() []metav1.Condition {
		get(t, obj)
		return obj.GetConditions()
	}, wakeTimeout, 50*time.Millisecond).Should(haveCondition(condType, status, reason))
}

// awaitReconcile waits until the GoofyMachine controller has finished a reconcile since its
// count was before.
func awaitReconcile(t testing.TB, before float64) {
	t.Helper()
	NewWithT(t).Eventually(func() float64 { return reconcileTotal(t, "goofymachine") }, wakeTimeout, 20*time.Millisecond).
		Should(BeNumerically(">", before))
}

// awaitIdle waits until the GoofyMachine controller has run no reconcile for a second: from then
// on, a machine that is still waiting waits for an event.
func awaitIdle(t testing.TB) {
	t.Helper()
	last, since := reconcileTotal(t, "goofymachine"), time.Now()
	NewWithT(t).Eventually(func() time.Duration {
		if n := reconcileTotal(t, "goofymachine"); n != last {
			last, since = n, time.Now()
		}
		return time.Since(since)
	}, wakeTimeout, 50*time.Millisecond).Should(BeNumerically(">=", time.Second))
}
