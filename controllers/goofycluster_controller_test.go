package controllers

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/cluster-api/util/secret"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/testenv"
)

// TestClusterProvisioning: a GoofyCluster gets a port, its endpoint, failure domains, Ready
// conditions and a workload store with the default namespaces.
func TestClusterProvisioning(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	h := newHarness(t)
	f := newFixture(t, newNamespace(t), "prov", nil)

	// Two reconciles, two writes: the first stores the finalizer with the endpoint, on a port the
	// mux reserves in memory only, in one object patch and ends there, as CAPI's controllers do
	// (its watch event starts the second); the second claims the listener on that port and writes
	// the status (Paused=False, Ready, provisioned, failure domains), nothing else.
	key := mux.ClusterKey(f.ns, "prov")
	g.Expect(h.writesDuring(func() { g.Expect(h.reconcileCluster(t, f.gc)).To(Equal(ctrl.Result{})) })).To(BeEquivalentTo(1))
	_, listening := h.mux.Listener(key)
	g.Expect(listening).To(BeFalse(), "the finalizer's reconcile starts no listener")
	_, hasStore := h.stores.GetCluster(key)
	g.Expect(hasStore).To(BeFalse(), "the finalizer's reconcile creates no store")
	get(t, f.gc)
	g.Expect(f.gc.Finalizers).To(ConsistOf(infrav1.ClusterFinalizer))
	g.Expect(f.gc.Spec.ControlPlaneEndpoint.Host).To(Equal("127.0.0.1"))
	g.Expect(f.gc.Spec.ControlPlaneEndpoint.Port).NotTo(BeZero())
	g.Expect(f.gc.Status.Conditions).To(BeEmpty(), "the one write was the object patch")
	endpoint, generation := f.gc.Spec.ControlPlaneEndpoint, f.gc.Generation
	g.Expect(h.writesDuring(func() { g.Expect(h.reconcileCluster(t, f.gc)).To(Equal(ctrl.Result{})) })).To(BeEquivalentTo(1))
	get(t, f.gc)
	g.Expect(f.gc.Generation).To(Equal(generation), "the one write was the status patch")
	g.Expect(f.gc.Spec.ControlPlaneEndpoint).To(Equal(endpoint))
	g.Expect(f.gc.Status.Conditions).To(ContainElement(And(HaveField("Type", infrav1.PausedCondition), HaveField("Status", metav1.ConditionFalse))))
	g.Expect(f.gc.Finalizers).To(ConsistOf(infrav1.ClusterFinalizer))
	// The conditions observe the generation that includes Goofy's own endpoint write.
	for _, c := range f.gc.Status.Conditions {
		g.Expect(c.ObservedGeneration).To(Equal(f.gc.Generation), c.Type)
	}

	l, ok := h.mux.Listener(key)
	g.Expect(ok).To(BeTrue())
	g.Expect(f.gc.Spec.ControlPlaneEndpoint).To(Equal(clusterv1.APIEndpoint{Host: "127.0.0.1", Port: int32(l.Port())}))
	g.Expect(l.Port()).To(BeNumerically(">=", testPortMin))
	g.Expect(l.Port()).To(BeNumerically("<=", testPortMax))
	g.Expect(f.gc.Status.Initialization.Provisioned).To(Equal(ptr.To(true)))
	g.Expect(f.gc.Status.FailureDomains).To(Equal([]clusterv1.FailureDomain{{Name: "fd-1", ControlPlane: ptr.To(true)}, {Name: "fd-2"}}))
	for _, c := range []string{infrav1.ReadyCondition, infrav1.LoadBalancerReadyCondition} {
		g.Expect(f.gc.Status.Conditions).To(ContainElement(And(HaveField("Type", c), HaveField("Status", metav1.ConditionTrue))))
	}
	c, _ := l.GetClient()
	for _, ns := range []string{"default", "kube-public", "kube-system"} {
		g.Expect(c.Get(context.Background(), client.ObjectKey{Name: ns}, &corev1.Namespace{})).To(Succeed(), ns)
	}
	// Reconciling again keeps the endpoint and writes nothing.
	g.Expect(h.writesDuring(func() { h.reconcileCluster(t, f.gc) })).To(BeZero())
	port := f.gc.Spec.ControlPlaneEndpoint.Port
	get(t, f.gc)
	g.Expect(f.gc.Spec.ControlPlaneEndpoint.Port).To(Equal(port))
}

// TestClusterPortRangeExhausted: no free port is a condition with a clear reason, not a panic.
func TestClusterPortRangeExhausted(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	h := newHarness(t)
	// A range of one port, already taken by another cluster.
	m, err := mux.NewWorkloadClustersMux(store.NewManager(), "127.0.0.1", mux.WithPortRange(testPortMax-1, testPortMax-1))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	_, err = m.InitWorkloadClusterListener("other/taken")
	g.Expect(err).NotTo(HaveOccurred())
	h.clusterR.Mux = m

	f := newFixture(t, newNamespace(t), "full", nil)
	h.reconcileCluster(t, f.gc) // stores the finalizer, alone: no port to reserve
	_, err = h.clusterR.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f.gc)})
	g.Expect(err).To(MatchError(mux.ErrPortRangeExhausted))
	get(t, f.gc)
	g.Expect(f.gc.Status.Conditions).To(ContainElement(And(
		HaveField("Type", infrav1.ReadyCondition), HaveField("Status", metav1.ConditionFalse), HaveField("Reason", infrav1.PortRangeExhaustedReason))))
	g.Expect(f.gc.Spec.ControlPlaneEndpoint.Port).To(BeZero())
}

// TestPause: Cluster.spec.paused and the paused annotation set Paused=True and stop progress;
// unpausing resumes.
func TestPause(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	h := newHarness(t)
	f := newFixture(t, newNamespace(t), "pause", nil)

	get(t, f.cluster)
	f.cluster.Spec.Paused = ptr.To(true)
	g.Expect(k8sClient.Update(ctx, f.cluster)).To(Succeed())
	for i := 0; i < 3; i++ {
		g.Expect(h.reconcileCluster(t, f.gc)).To(Equal(ctrl.Result{}))
	}
	get(t, f.gc)
	g.Expect(f.gc.Status.Conditions).To(haveCondition(infrav1.PausedCondition, metav1.ConditionTrue, clusterv1.PausedReason))
	g.Expect(f.gc.Finalizers).To(BeEmpty())
	g.Expect(f.gc.Spec.ControlPlaneEndpoint.Port).To(BeZero())
	_, ok := h.mux.Listener(mux.ClusterKey(f.ns, "pause"))
	g.Expect(ok).To(BeFalse())

	get(t, f.cluster)
	f.cluster.Spec.Paused = nil
	g.Expect(k8sClient.Update(ctx, f.cluster)).To(Succeed())
	h.provisionCluster(t, f)
	get(t, f.gc)
	g.Expect(f.gc.Status.Conditions).To(haveCondition(infrav1.PausedCondition, metav1.ConditionFalse, clusterv1.NotPausedReason))

	// The paused annotation on the GoofyMachine itself.
	_, gm := newMachine(t, f, "pause-cp-0", machineOpts{controlPlane: true})
	gm.Annotations = map[string]string{clusterv1.PausedAnnotation: ""}
	g.Expect(k8sClient.Update(ctx, gm)).To(Succeed())
	for i := 0; i < 3; i++ {
		g.Expect(h.reconcileMachine(t, gm)).To(Equal(ctrl.Result{}))
	}
	get(t, gm)
	g.Expect(gm.Status.Conditions).To(haveCondition(infrav1.PausedCondition, metav1.ConditionTrue, clusterv1.PausedReason))
	g.Expect(gm.Finalizers).To(BeEmpty())
	g.Expect(gm.Spec.ProviderID).To(BeEmpty())

	delete(gm.Annotations, clusterv1.PausedAnnotation)
	g.Expect(k8sClient.Update(ctx, gm)).To(Succeed())
	h.reconcileUntilReady(t, gm)

	// Pausing the Cluster freezes a machine mid-way: no phase completes while paused.
	_, gm2 := newMachine(t, f, "pause-cp-1", machineOpts{controlPlane: true, backend: &infrav1.InMemoryMachineBackend{Node: phaseOf(time.Minute, "")}})
	h.reconcileToPhase(t, gm2, infrav1.NodeProvisionedCondition)
	get(t, f.cluster)
	f.cluster.Spec.Paused = ptr.To(true)
	g.Expect(k8sClient.Update(ctx, f.cluster)).To(Succeed())
	h.clock.Step(2 * time.Minute)
	for i := 0; i < 2; i++ {
		g.Expect(h.reconcileMachine(t, gm2)).To(Equal(ctrl.Result{}))
	}
	get(t, gm2)
	g.Expect(gm2.Status.Conditions).To(haveCondition(infrav1.PausedCondition, metav1.ConditionTrue, clusterv1.PausedReason))
	g.Expect(gm2.Status.Conditions).To(haveCondition(infrav1.NodeProvisionedCondition, metav1.ConditionFalse, infrav1.ProvisioningReason))
}

// TestEndpointRepair: after a restart with a new advertised host (a new pod IP), the GoofyCluster's
// endpoint and the server of CAPI's <cluster>-kubeconfig secret move to it, on the same port, and
// the repaired kubeconfig reaches the cluster.
func TestEndpointRepair(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	h := newHarness(t)
	f := newFixture(t, newNamespace(t), "repair", nil)
	h.provisionCluster(t, f)
	_, gm := newMachine(t, f, "repair-cp-0", machineOpts{controlPlane: true})
	h.reconcileUntilReady(t, gm)
	get(t, f.cluster)
	// CAPI's Cluster controller writes the kubeconfig secret from the Cluster's endpoint.
	g.Expect(kubeconfig.CreateSecret(ctx, k8sClient, f.cluster)).To(Succeed())
	port := int(f.gc.Spec.ControlPlaneEndpoint.Port)
	g.Expect(h.mux.Shutdown(ctx)).To(Succeed())

	// The new process advertises another name for the same loopback address.
	stores := store.NewManager()
	m, err := mux.NewWorkloadClustersMux(stores, "localhost", mux.WithBindAddress("127.0.0.1"), mux.WithPortRange(testPortMin, testPortMax))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	// The new process sees its own namespace only, as a manager with --namespace: the other
	// tests' GoofyClusters in this envtest name the same ports, and a restart with state in
	// memory refuses a port two workload clusters name.
	h2 := &harness{stores: stores, mux: m, clock: h.clock,
		clusterR: &GoofyClusterReconciler{Client: client.NewNamespacedClient(k8sClient, f.cluster.Namespace), Mux: m},
		machineR: &GoofyMachineReconciler{Client: k8sClient, Mux: m, Clock: h.clock}}

	h2.reconcileCluster(t, f.gc)
	get(t, f.gc)
	g.Expect(f.gc.Spec.ControlPlaneEndpoint).To(Equal(clusterv1.APIEndpoint{Host: "localhost", Port: int32(port)}))
	data, err := kubeconfig.FromSecret(ctx, k8sClient, client.ObjectKeyFromObject(f.cluster))
	g.Expect(err).NotTo(HaveOccurred())
	kc, err := clientcmd.Load(data)
	g.Expect(err).NotTo(HaveOccurred())
	for _, c := range kc.Clusters {
		g.Expect(c.Server).To(Equal("https://" + net.JoinHostPort("localhost", strconv.Itoa(port))))
	}

	// The machine comes back at once; CAPI's repaired kubeconfig (its own client certificate) works.
	g.Expect(h2.reconcileMachine(t, gm)).To(Equal(ctrl.Result{}))
	rc, err := clientcmd.RESTConfigFromKubeConfig(data)
	g.Expect(err).NotTo(HaveOccurred())
	rc.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	g.Expect(err).NotTo(HaveOccurred())
	node, err := cs.CoreV1().Nodes().Get(ctx, "repair-cp-0", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(node.Spec.ProviderID).To(Equal(gm.Spec.ProviderID))
}

// managerOptions configure startManager.
type managerOptions struct {
	watchFilter string
	concurrency int           // reconcile workers per controller; 0 means 1
	syncPeriod  time.Duration // the manager's --sync-period; 0 means controller-runtime's (10 h)
	// wrapClient, when set, wraps the client the reconcilers read and write with.
	wrapClient func(client.Client) client.Client
}

// startManager runs h's mux with new reconcilers (GoofyCluster, GoofyMachine, GoofyMachineTemplate)
// and a HotRestarter in a controller-runtime manager whose cache only sees ns; the manager stops
// when the test ends.
func startManager(t testing.TB, h *harness, ns string, o managerOptions) {
	t.Helper()
	cacheOpts := cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}}
	if o.syncPeriod > 0 {
		cacheOpts.SyncPeriod = &o.syncPeriod
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 testScheme,
		Cache:                  cacheOpts,
		Client:                 client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Every test starts its own manager with the same controller names.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	restarter := &HotRestarter{Reader: mgr.GetAPIReader(), Mux: h.mux, Namespace: ns}
	if err := mgr.Add(restarter); err != nil {
		t.Fatal(err)
	}
	c := mgr.GetClient()
	if o.wrapClient != nil {
		c = o.wrapClient(c)
	}
	h.clusterR = &GoofyClusterReconciler{Client: c, Mux: h.mux, WatchFilterValue: o.watchFilter, Restarter: restarter}
	h.machineR = &GoofyMachineReconciler{Client: c, Mux: h.mux, WatchFilterValue: o.watchFilter, Restarter: restarter}
	opts := controller.Options{MaxConcurrentReconciles: max(o.concurrency, 1)}
	if err := h.clusterR.SetupWithManager(ctx, mgr, opts); err != nil {
		t.Fatal(err)
	}
	if err := h.machineR.SetupWithManager(ctx, mgr, opts); err != nil {
		t.Fatal(err)
	}
	templateR := &GoofyMachineTemplateReconciler{Client: c, WatchFilterValue: o.watchFilter}
	if err := templateR.SetupWithManager(ctx, mgr, opts); err != nil {
		t.Fatal(err)
	}
	testenv.Go(t, mgr.Start)
}

// awaitProvisioned waits until the running manager has provisioned f's GoofyCluster.
func awaitProvisioned(t testing.TB, f *fixture) {
	t.Helper()
	NewWithT(t).Eventually(func() bool {
		get(t, f.gc)
		return ptr.Deref(f.gc.Status.Initialization.Provisioned, false)
	}, 30*time.Second, 50*time.Millisecond).Should(BeTrue())
}

// setClusterStatus does what CAPI's Cluster controller does once the GoofyCluster is provisioned
// (endpoint, infrastructureProvisioned) and, with controlPlaneInitialized, what KCP reports.
func setClusterStatus(t testing.TB, f *fixture, controlPlaneInitialized bool) {
	t.Helper()
	get(t, f.gc)
	get(t, f.cluster)
	f.cluster.Spec.ControlPlaneEndpoint = f.gc.Spec.ControlPlaneEndpoint
	if err := k8sClient.Update(context.Background(), f.cluster); err != nil {
		t.Fatal(err)
	}
	f.cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	if controlPlaneInitialized {
		f.cluster.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	}
	if err := k8sClient.Status().Update(context.Background(), f.cluster); err != nil {
		t.Fatal(err)
	}
}

// TestWatchFilter: a manager started with a watch-filter value reconciles only objects carrying
// the watch-filter label with that value.
func TestWatchFilter(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ns := newNamespace(t)
	h := newHarness(t)
	startManager(t, h, ns, managerOptions{watchFilter: "goofy-test"})

	// The unlabelled cluster and machine exist first, so an unfiltered controller sees them first.
	other := newFixture(t, ns, "other", nil)
	_, otherGM := newMachine(t, other, "other-cp-0", machineOpts{controlPlane: true})
	mine := newFixture(t, ns, "mine", map[string]string{clusterv1.WatchLabel: "goofy-test"})
	awaitProvisioned(t, mine)
	setClusterStatus(t, mine, false)
	_, gm := newMachine(t, mine, "mine-cp-0", machineOpts{controlPlane: true, labels: map[string]string{clusterv1.WatchLabel: "goofy-test"}})
	g.Eventually(func() []metav1.Condition {
		get(t, gm)
		return gm.Status.Conditions
	}, 30*time.Second, 100*time.Millisecond).Should(haveCondition(infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason))

	// Meanwhile the unlabelled objects were never touched.
	get(t, other.gc)
	g.Expect(other.gc.Finalizers).To(BeEmpty())
	g.Expect(other.gc.Status.Conditions).To(BeEmpty())
	get(t, otherGM)
	g.Expect(otherGM.Finalizers).To(BeEmpty())
	g.Expect(otherGM.Status.Conditions).To(BeEmpty())
	_, ok := h.mux.Listener(mux.ClusterKey(ns, "other"))
	g.Expect(ok).To(BeFalse())
}

// A kubeconfig Secret without data (emptied by hand, or by a tool) does not crash the repair
// when the advertised host changes: the endpoint moves, the Secret is left as it is.
func TestEndpointRepairWithEmptyKubeconfigSecret(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	h := newHarness(t)
	f := newFixture(t, newNamespace(t), "repair-empty", nil)
	h.provisionCluster(t, f)
	get(t, f.cluster)
	empty := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.cluster.Namespace, Name: secret.Name(f.cluster.Name, secret.Kubeconfig)}}
	g.Expect(k8sClient.Create(ctx, empty)).To(Succeed())
	port := int(f.gc.Spec.ControlPlaneEndpoint.Port)
	g.Expect(h.mux.Shutdown(ctx)).To(Succeed())

	stores := store.NewManager()
	m, err := mux.NewWorkloadClustersMux(stores, "localhost", mux.WithBindAddress("127.0.0.1"), mux.WithPortRange(testPortMin, testPortMax))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	// Its own namespace only, as in TestEndpointRepair.
	h2 := &harness{stores: stores, mux: m, clock: h.clock, clusterR: &GoofyClusterReconciler{Client: client.NewNamespacedClient(k8sClient, f.cluster.Namespace), Mux: m}}
	h2.reconcileCluster(t, f.gc) // panicked writing into the Secret's nil map
	get(t, f.gc)
	g.Expect(f.gc.Spec.ControlPlaneEndpoint).To(Equal(clusterv1.APIEndpoint{Host: "localhost", Port: int32(port)}))
	g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(empty), empty)).To(Succeed())
	g.Expect(empty.Data).To(BeEmpty())
}
