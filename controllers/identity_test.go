package controllers

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// durableHarness is a harness whose workload state is on disk in dir; restart throws it away and
// builds the next "process" over the same directory, restored by a HotRestarter as at start-up.
type durableHarness struct {
	*harness
	dir string
	db  *storage.DB
	ns  string
}

func newDurableHarness(t *testing.T, ns string) *durableHarness {
	t.Helper()
	d := &durableHarness{dir: t.TempDir(), ns: ns}
	d.open(t)
	d.harness = newHarnessWith(t, store.NewManager(store.WithStorage(d.db)))
	return d
}

func (d *durableHarness) open(t *testing.T) {
	t.Helper()
	db, err := storage.Open(d.dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	d.db = db
}

func (d *durableHarness) restart(t *testing.T) { d.restartWith(t, nil) }

// restartWith is restart, with down (when not nil) run while no process runs: between the end of
// the old one and the start of the new one.
func (d *durableHarness) restartWith(t *testing.T, down func()) {
	t.Helper()
	ctx := context.Background()
	if err := d.mux.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.db.Close(); err != nil {
		t.Fatal(err)
	}
	if down != nil {
		down()
	}
	d.open(t)
	next := newHarnessWith(t, store.NewManager(store.WithStorage(d.db)))
	next.clock = d.clock
	next.machineR.Clock = d.clock
	restarter := &HotRestarter{Reader: k8sClient, Mux: next.mux, Namespace: d.ns}
	next.clusterR.Restarter, next.machineR.Restarter = restarter, restarter
	if err := restarter.Start(ctx); err != nil {
		t.Fatal(err)
	}
	d.harness = next
}

func ownerOf(m *mux.WorkloadClustersMux, key string) types.UID {
	uid, _ := m.OwnerOf(key)
	return uid
}

// deleteCluster deletes a GoofyCluster and reconciles it until it is gone.
func (h *harness) deleteCluster(t testing.TB, gc *infrav1.GoofyCluster) {
	t.Helper()
	ctx := context.Background()
	if err := k8sClient.Delete(ctx, gc); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		h.reconcileCluster(t, gc)
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(gc), &infrav1.GoofyCluster{}); apierrors.IsNotFound(err) {
			return
		}
	}
	t.Fatalf("GoofyCluster %s still exists after 3 reconciles of its deletion", gc.Name)
}

// copyGoofyCluster creates a copy of gc under another name, as `kubectl get -o yaml`, a new
// name and `kubectl create` would: labels, owner references, finalizers and spec (with the
// endpoint), no status.
func copyGoofyCluster(t testing.TB, gc *infrav1.GoofyCluster, name string) *infrav1.GoofyCluster {
	t.Helper()
	cp := &infrav1.GoofyCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: gc.Namespace, Name: name, Labels: gc.Labels,
			OwnerReferences: gc.OwnerReferences, Finalizers: gc.Finalizers},
		Spec: *gc.Spec.DeepCopy(),
	}
	if err := k8sClient.Create(context.Background(), cp); err != nil {
		t.Fatal(err)
	}
	return cp
}

// TestCopiedGoofyClusterLeavesOriginal: a copy of a GoofyCluster (same owner Cluster, same
// cluster-name label, so the same workload cluster key and even the same endpoint) is not the
// Cluster's infrastructure: it says so in a condition, and its deletion leaves the original's
// listener serving and its store in place, also when the manager restarted in between.
func TestCopiedGoofyClusterLeavesOriginal(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	h := newDurableHarness(t, ns)
	f := newFixture(t, ns, "orig", nil)
	h.provisionCluster(t, f)
	_, cp := newMachine(t, f, "orig-cp-0", machineOpts{controlPlane: true})
	h.reconcileUntilReady(t, cp)
	key := mux.ClusterKey(ns, "orig")
	serving := func() {
		t.Helper()
		_, err := workloadClient(t, mustListener(t, h.harness, f)).Discovery().ServerVersion()
		g.Expect(err).NotTo(HaveOccurred(), "the original cluster must keep serving")
		_, err = workloadClient(t, mustListener(t, h.harness, f)).CoreV1().Nodes().Get(ctx, "orig-cp-0", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred(), "the original cluster's store must keep its Node")
	}
	serving()
	g.Expect(ownerOf(h.mux, key)).To(Equal(f.gc.UID))

	copied := copyGoofyCluster(t, f.gc, "orig-copy")
	h.reconcileCluster(t, copied)
	get(t, copied)
	g.Expect(copied.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.NotClusterInfrastructureReason))
	g.Expect(copied.Status.Initialization.Provisioned).To(BeNil())
	h.deleteCluster(t, copied)
	serving()
	g.Expect(ownerOf(h.mux, key)).To(Equal(f.gc.UID))

	// A copy that outlives a restart: the restored listener is the original's, not the copy's.
	copied = copyGoofyCluster(t, f.gc, "orig-copy-2")
	h.restart(t)
	g.Expect(ownerOf(h.mux, key)).To(Equal(f.gc.UID))
	h.reconcileCluster(t, f.gc)
	h.reconcileMachine(t, cp) // re-adds the API server
	serving()
	h.deleteCluster(t, copied)
	serving()

	// The original's own deletion still frees everything.
	h.deleteMachine(t, cp)
	h.deleteCluster(t, f.gc)
	_, ok := h.mux.Listener(key)
	g.Expect(ok).To(BeFalse())
	_, ok = h.stores.GetCluster(key)
	g.Expect(ok).To(BeFalse())
}

// TestDecoyGoofyMachineLeavesRealMachine: GoofyMachines that the Machine does not name, a copy
// owned by the real Machine and a decoy named like the Machine without any owner, say so in a
// condition, and their deletion leaves the real machine's Node, etcd member and API server,
// also after a restart (the Node records its GoofyMachine's UID in the durable workload state).
func TestDecoyGoofyMachineLeavesRealMachine(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	h := newDurableHarness(t, ns)
	f := newFixture(t, ns, "decoy", nil)
	h.provisionCluster(t, f)
	// The Machine and its GoofyMachine have different names, as when CAPI clones the
	// GoofyMachine from a template: the Node is named after the Machine.
	_, real := newMachine(t, f, "decoy-cp-0", machineOpts{controlPlane: true, infraName: "decoy-cp-0-infra"})
	h.reconcileUntilReady(t, real)
	key := mux.ClusterKey(ns, "decoy")
	intact := func(apiServer bool) {
		t.Helper()
		l := mustListener(t, h.harness, f)
		c, err := l.GetClient()
		g.Expect(err).NotTo(HaveOccurred())
		node := &corev1.Node{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: "decoy-cp-0"}, node)).To(Succeed(), "the real machine's Node must stay")
		g.Expect(node.Annotations).To(HaveKeyWithValue(MachineUIDAnnotation, string(real.UID)))
		if apiServer {
			g.Expect(h.mux.HasEtcdMember(key, "etcd-decoy-cp-0")).To(BeTrue(), "the real machine's etcd member must stay")
			g.Expect(h.mux.HasAPIServer(key, "kube-apiserver-decoy-cp-0")).To(BeTrue(), "the real machine's API server must stay")
			_, err = workloadClient(t, l).Discovery().ServerVersion()
			g.Expect(err).NotTo(HaveOccurred())
		}
	}
	intact(true)

	// A copy of the GoofyMachine, owned by the real Machine.
	copied := &infrav1.GoofyMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "decoy-copy", Labels: real.Labels,
			OwnerReferences: real.OwnerReferences, Finalizers: real.Finalizers},
		Spec: *real.Spec.DeepCopy(),
	}
	g.Expect(k8sClient.Create(ctx, copied)).To(Succeed())
	h.reconcileMachine(t, copied)
	get(t, copied)
	g.Expect(copied.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.NotMachineInfrastructureReason))
	g.Expect(copied.Spec.ProviderID).To(Equal(real.Spec.ProviderID)) // copied, not provisioned
	h.deleteMachine(t, copied)
	intact(true)

	// A decoy without owner, named like the Machine (= the Node), released as an orphan after
	// a restart, before the real machine is reconciled again.
	decoy := &infrav1.GoofyMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "decoy-cp-0", Labels: real.Labels, Finalizers: real.Finalizers},
		Spec:       *real.Spec.DeepCopy(),
	}
	g.Expect(k8sClient.Create(ctx, decoy)).To(Succeed())
	h.restart(t)
	h.reconcileCluster(t, f.gc)
	h.deleteMachine(t, decoy)
	intact(false)
	h.reconcileMachine(t, real)
	intact(true)
}
