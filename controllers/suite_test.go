package controllers

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/secret"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/testenv"
)

// The envtest suite: one real kube-apiserver + etcd for the whole package, with this repository's
// CRDs (labelled with the CAPI contract as config/crd/kustomization.yaml does) and CAPI's core
// CRDs from the module cache. The tests create the CAPI owner objects themselves and call the
// reconcilers directly, except where a running manager is the point (predicates, benchmarks).

const (
	// kubernetesVersion is the version of the simulated machines.
	kubernetesVersion = "v1.36.3"
	// Listener ports of this package's tests: apart from the other packages' ranges (packages
	// run in parallel), below the kernel's ephemeral range (an outgoing connection can take an
	// ephemeral port between two tests) and below the e2e suite's 20000-32767.
	testPortMin, testPortMax = 15000, 15999
)

var (
	testScheme = runtime.NewScheme()
	cfg        *rest.Config
	k8sClient  client.Client // uncached: every read sees the last write
)

func init() {
	_ = clientgoscheme.AddToScheme(testScheme)
	_ = apiextensionsv1.AddToScheme(testScheme)
	_ = clusterv1.AddToScheme(testScheme)
	_ = bootstrapv1.AddToScheme(testScheme)
	_ = controlplanev1.AddToScheme(testScheme)
	_ = infrav1.AddToScheme(testScheme)
}

func TestMain(m *testing.M) {
	ctrl.SetLogger(testLogger())
	os.Exit(testenv.RunTests(m, func(c *rest.Config) (err error) {
		cfg = c
		k8sClient, err = client.New(cfg, client.Options{Scheme: testScheme})
		return err
	}))
}

// testLogger discards logs unless GOOFY_TEST_LOG is set (then it logs to stderr).
func testLogger() logr.Logger {
	if os.Getenv("GOOFY_TEST_LOG") == "" {
		return logr.Discard()
	}
	return zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr))
}

func requireEnv(t testing.TB) {
	t.Helper()
	if cfg == nil {
		t.Skipf("envtest binaries not built (run 'make envtest'); looked in %s", testenv.AssetsDir())
	}
}

// harness is one "process" of the provider: a store manager, a mux and the two reconcilers.
type harness struct {
	stores   *store.Manager
	mux      *mux.WorkloadClustersMux
	clusterR *GoofyClusterReconciler
	machineR *GoofyMachineReconciler
	clock    *clocktesting.FakeClock
	// writes counts the requests that change objects which the reconcilers sent to the
	// management API server (creates, updates, patches, deletes; subresources included).
	writes atomic.Int64
}

// countingClient is an uncached client like k8sClient with every write counted in *n
// (controller-runtime's interceptor).
func countingClient(n *atomic.Int64) client.Client {
	count := func() { n.Add(1) }
	w, err := client.NewWithWatch(cfg, client.Options{Scheme: testScheme})
	if err != nil {
		panic(err) // the same config made k8sClient
	}
	return interceptor.NewClient(w, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			count()
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			count()
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			count()
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			count()
			return c.Delete(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			count()
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			count()
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
}

// writesDuring returns how many writes the reconcilers sent while f ran.
func (h *harness) writesDuring(f func()) int64 {
	before := h.writes.Load()
	f()
	return h.writes.Load() - before
}

// testEpoch is a whole second, as Kubernetes stores condition times.
var testEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newHarness(t testing.TB) *harness {
	t.Helper()
	return newHarnessWith(t, store.NewManager())
}

// newHarnessWith is newHarness over the given stores (e.g. durable ones).
func newHarnessWith(t testing.TB, stores *store.Manager) *harness {
	t.Helper()
	m, err := mux.NewWorkloadClustersMux(stores, "127.0.0.1", mux.WithPortRange(testPortMin, testPortMax))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Shutdown(ctx)
	})
	h := &harness{stores: stores, mux: m, clock: clocktesting.NewFakeClock(testEpoch)}
	c := countingClient(&h.writes)
	h.clusterR = &GoofyClusterReconciler{Client: c, Mux: m}
	h.machineR = &GoofyMachineReconciler{Client: c, Mux: m, Clock: h.clock}
	return h
}

func (h *harness) reconcileCluster(t testing.TB, gc *infrav1.GoofyCluster) ctrl.Result {
	t.Helper()
	res, err := h.clusterR.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(gc)})
	if err != nil {
		t.Fatalf("reconciling GoofyCluster %s: %v", gc.Name, err)
	}
	return res
}

func (h *harness) reconcileMachine(t testing.TB, gm *infrav1.GoofyMachine) ctrl.Result {
	t.Helper()
	res, err := h.machineR.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(gm)})
	if err != nil {
		t.Fatalf("reconciling GoofyMachine %s: %v", gm.Name, err)
	}
	return res
}

// provisionCluster reconciles the GoofyCluster until its endpoint is recorded (Paused condition,
// finalizer, listener), then marks the Cluster's infrastructure provisioned and copies the endpoint
// to it, as CAPI's Cluster controller does.
func (h *harness) provisionCluster(t testing.TB, f *fixture) {
	t.Helper()
	for i := 0; i < 5; i++ {
		h.reconcileCluster(t, f.gc)
		get(t, f.gc)
		if ptr.Deref(f.gc.Status.Initialization.Provisioned, false) {
			break
		}
	}
	if !ptr.Deref(f.gc.Status.Initialization.Provisioned, false) {
		t.Fatalf("GoofyCluster %s not provisioned: %+v", f.gc.Name, f.gc.Status.Conditions)
	}
	get(t, f.cluster)
	f.cluster.Spec.ControlPlaneEndpoint = f.gc.Spec.ControlPlaneEndpoint
	if err := k8sClient.Update(context.Background(), f.cluster); err != nil {
		t.Fatal(err)
	}
	f.cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	if err := k8sClient.Status().Update(context.Background(), f.cluster); err != nil {
		t.Fatal(err)
	}
}

// fixture is one CAPI cluster as the CAPI controllers would have created it.
type fixture struct {
	ns      string
	cluster *clusterv1.Cluster
	gc      *infrav1.GoofyCluster
}

// newNamespace creates a namespace for one test.
func newNamespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "goofy-test-"}}
	if err := k8sClient.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// newFixture creates a Cluster, its CAs (<cluster>-ca, <cluster>-etcd, ... made by CAPI's own
// util/secret) and its GoofyCluster owned by the Cluster. labels go on both objects.
func newFixture(t testing.TB, ns, name string, labels map[string]string) *fixture {
	t.Helper()
	ctx := context.Background()
	all := func() map[string]string {
		l := map[string]string{clusterv1.ClusterNameLabel: name}
		for k, v := range labels {
			l[k] = v
		}
		return l
	}
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: all()},
		Spec: clusterv1.ClusterSpec{
			ClusterNetwork: clusterv1.ClusterNetwork{
				Pods:          clusterv1.NetworkRanges{CIDRBlocks: []string{"192.168.0.0/16"}},
				Services:      clusterv1.NetworkRanges{CIDRBlocks: []string{"10.128.0.0/12"}},
				ServiceDomain: "cluster.local",
			},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: infrav1.GroupVersion.Group, Kind: "GoofyCluster", Name: name,
			},
		},
	}
	if err := k8sClient.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	owner := metav1.OwnerReference{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: cluster.Name, UID: cluster.UID}
	certs := secret.NewCertificatesForInitialControlPlane(&bootstrapv1.ClusterConfiguration{})
	if err := certs.LookupOrGenerate(ctx, k8sClient, client.ObjectKeyFromObject(cluster), owner); err != nil {
		t.Fatal(err)
	}
	gc := &infrav1.GoofyCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: all(), OwnerReferences: []metav1.OwnerReference{owner}},
		Spec: infrav1.GoofyClusterSpec{
			FailureDomains: []infrav1.GoofyFailureDomain{{Name: "fd-1", ControlPlane: ptr.To(true)}, {Name: "fd-2"}},
		},
	}
	if err := k8sClient.Create(ctx, gc); err != nil {
		t.Fatal(err)
	}
	return &fixture{ns: ns, cluster: cluster, gc: gc}
}

// machineOpts describes a Machine + GoofyMachine pair.
type machineOpts struct {
	controlPlane  bool
	noBootstrap   bool // leave spec.bootstrap.dataSecretName unset
	noOwner       bool // create the GoofyMachine without its owner reference to the Machine
	failureDomain string
	backend       *infrav1.InMemoryMachineBackend
	capacity      corev1.ResourceList
	labels        map[string]string
	annotations   map[string]string
	version       string // default kubernetesVersion
	infraName     string // the GoofyMachine's name (the Machine's spec.infrastructureRef); default the Machine's
}

// newMachine creates a Machine and its GoofyMachine (owned by the Machine), as CAPI's MachineSet
// or KCP controllers would.
func newMachine(t testing.TB, f *fixture, name string, o machineOpts) (*clusterv1.Machine, *infrav1.GoofyMachine) {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{clusterv1.ClusterNameLabel: f.cluster.Name}
	if o.controlPlane {
		labels[clusterv1.MachineControlPlaneLabel] = ""
	}
	for k, v := range o.labels {
		labels[k] = v
	}
	infraName := name
	if o.infraName != "" {
		infraName = o.infraName
	}
	machine := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name, Labels: labels},
		Spec: clusterv1.MachineSpec{
			ClusterName: f.cluster.Name,
			Version:     kubernetesVersion,
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: infrav1.GroupVersion.Group, Kind: "GoofyMachine", Name: infraName,
			},
			FailureDomain: o.failureDomain,
		},
	}
	if o.version != "" {
		machine.Spec.Version = o.version
	}
	if !o.noBootstrap {
		machine.Spec.Bootstrap.DataSecretName = ptr.To(name + "-bootstrap")
	} else {
		machine.Spec.Bootstrap.ConfigRef = clusterv1.ContractVersionedObjectReference{
			APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfig", Name: name,
		}
	}
	if err := k8sClient.Create(ctx, machine); err != nil {
		t.Fatal(err)
	}
	gm := &infrav1.GoofyMachine{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: f.ns, Name: infraName, Labels: labels, Annotations: o.annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: machine.Name, UID: machine.UID,
			}},
		},
	}
	if o.noOwner {
		gm.OwnerReferences = nil
	}
	if o.backend != nil {
		gm.Spec.Backend.InMemory = o.backend
	}
	gm.Spec.Capacity = o.capacity
	if err := k8sClient.Create(ctx, gm); err != nil {
		t.Fatal(err)
	}
	return machine, gm
}

// get re-reads obj.
func get(t testing.TB, obj client.Object) {
	t.Helper()
	if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatalf("getting %T %s: %v", obj, obj.GetName(), err)
	}
}

// reconcileUntilReady reconciles a zero-delay machine until Ready and returns the number of calls.
func (h *harness) reconcileUntilReady(t testing.TB, gm *infrav1.GoofyMachine) int {
	t.Helper()
	for i := 1; i <= 10; i++ {
		h.reconcileMachine(t, gm)
		get(t, gm)
		if c := condition(gm, infrav1.ReadyCondition); c != nil && c.Status == metav1.ConditionTrue {
			return i
		}
	}
	t.Fatalf("GoofyMachine %s not Ready after 10 reconciles: %+v", gm.Name, gm.Status.Conditions)
	return 0
}

func condition(gm *infrav1.GoofyMachine, condType string) *metav1.Condition {
	for i := range gm.Status.Conditions {
		if gm.Status.Conditions[i].Type == condType {
			return &gm.Status.Conditions[i]
		}
	}
	return nil
}

// haveCondition matches a condition of the given type, status and reason.
func haveCondition(condType string, status metav1.ConditionStatus, reason string) OmegaMatcher {
	return ContainElement(And(
		HaveField("Type", condType), HaveField("Status", status), HaveField("Reason", reason)))
}
