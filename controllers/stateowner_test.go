package controllers

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	bolt "go.etcd.io/bbolt"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// setEndpoint writes gc's spec.controlPlaneEndpoint straight at the API server (no webhook here).
func setEndpoint(t testing.TB, gc *infrav1.GoofyCluster, endpoint clusterv1.APIEndpoint) {
	t.Helper()
	orig := gc.DeepCopy()
	gc.Spec.ControlPlaneEndpoint = endpoint
	if err := k8sClient.Patch(context.Background(), gc, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
}

// TestRecreatedGoofyClusterStartsEmpty (issue 27 item 9): a GoofyCluster deleted while the
// manager is down (its finalizer removed by hand) and created again under the same name with the
// same endpoint, as a GitOps tool re-applies it, is a new workload cluster: at the restart it
// gets its port, but none of the deleted cluster's objects. The new one's state is then its own,
// across the next restart.
func TestRecreatedGoofyClusterStartsEmpty(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	h := newDurableHarness(t, ns)
	f := newFixture(t, ns, "again", nil)
	h.provisionCluster(t, f)
	key := mux.ClusterKey(ns, "again")
	marker := func(l *mux.WorkloadClusterListener, name string) error {
		c, _ := l.GetClient()
		return c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &corev1.ConfigMap{})
	}
	create := func(l *mux.WorkloadClusterListener, name string) {
		c, _ := l.GetClient()
		g.Expect(c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}})).To(Succeed())
	}
	create(mustListener(t, h.harness, f), "old")
	get(t, f.gc)
	endpoint := f.gc.Spec.ControlPlaneEndpoint
	oldUID := f.gc.UID

	var again *fixture
	h.restartWith(t, func() {
		orig := f.gc.DeepCopy()
		f.gc.Finalizers = nil
		g.Expect(k8sClient.Patch(ctx, f.gc, client.MergeFrom(orig))).To(Succeed())
		g.Expect(k8sClient.Delete(ctx, f.gc)).To(Succeed())
		g.Expect(k8sClient.Delete(ctx, f.cluster)).To(Succeed())
		for _, obj := range []client.Object{&infrav1.GoofyCluster{}, &clusterv1.Cluster{}} {
			g.Eventually(func() bool {
				return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "again"}, obj))
			}, 10*time.Second, 50*time.Millisecond).Should(BeTrue())
		}
		again = newFixture(t, ns, "again", nil)
		setEndpoint(t, again.gc, endpoint)
	})
	g.Expect(again.gc.UID).NotTo(Equal(oldUID))
	g.Expect(ownerOf(h.mux, key)).To(Equal(again.gc.UID))
	for i := 0; i < 3 && !conditions.IsTrue(again.gc, infrav1.ReadyCondition); i++ { // finalizer first, then status
		h.reconcileCluster(t, again.gc)
		get(t, again.gc)
	}
	g.Expect(again.gc.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason))
	l := mustListener(t, h.harness, again)
	g.Expect(l.Port()).To(BeEquivalentTo(endpoint.Port), "the endpoint stays where the new GoofyCluster says")
	g.Expect(apierrors.IsNotFound(marker(l, "old"))).To(BeTrue(), "the new GoofyCluster must not adopt the deleted one's objects")
	create(l, "new")

	h.restart(t)
	h.reconcileCluster(t, again.gc)
	g.Expect(marker(mustListener(t, h.harness, again), "new")).To(Succeed(), "the same GoofyCluster keeps its state")
}

// TestPortUnavailableAfterRestartIsRetried (issue 27 item 10): another process took a workload
// cluster's port while the manager was down. The endpoint cannot move (CAPI's
// controlPlaneEndpoint is immutable), so the GoofyCluster says why it is not served (Ready=False,
// PortUnavailable, naming the port and the bind error) and its reconciler tries again with a
// growing backoff; once the port is free the cluster serves again on it, with its state.
func TestPortUnavailableAfterRestartIsRetried(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	h := newDurableHarness(t, ns)
	f := newFixture(t, ns, "squat", nil)
	h.provisionCluster(t, f)
	// Phases that take time: the machine must not go through them again when the port is back.
	slow := &infrav1.InMemoryMachineBackend{VM: phaseOf(30*time.Second, ""), Node: phaseOf(10*time.Second, ""),
		Etcd: phaseOf(10*time.Second, ""), APIServer: phaseOf(10*time.Second, "")}
	_, cp := newMachine(t, f, "squat-cp-0", machineOpts{controlPlane: true, backend: slow})
	h.reconcileThroughPhases(t, cp)
	l := mustListener(t, h.harness, f)
	port := l.Port()
	_, err := workloadClient(t, l).CoreV1().ConfigMaps("default").Create(ctx,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept"}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	var squatter net.Listener
	h.restartWith(t, func() {
		var err error
		squatter, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(func() { _ = squatter.Close() })
	})
	key := mux.ClusterKey(ns, "squat")
	_, ok := h.mux.Listener(key)
	g.Expect(ok).To(BeFalse())

	var retries []time.Duration
	for range 3 {
		res := h.reconcileCluster(t, f.gc)
		retries = append(retries, res.RequeueAfter)
		get(t, f.gc)
		for _, c := range []string{infrav1.ReadyCondition, infrav1.LoadBalancerReadyCondition} {
			g.Expect(f.gc.Status.Conditions).To(haveCondition(c, metav1.ConditionFalse, infrav1.PortUnavailableReason), c)
			msg := conditions.Get(f.gc, c).Message
			g.Expect(msg).To(ContainSubstring("port " + strconv.Itoa(port)))
			g.Expect(msg).To(ContainSubstring("address already in use"))
		}
		_, ok = h.mux.Listener(key)
		g.Expect(ok).To(BeFalse())
	}
	g.Expect(retries).To(Equal([]time.Duration{portRetryMin, 2 * portRetryMin, 4 * portRetryMin}))
	g.Expect(f.gc.Spec.ControlPlaneEndpoint.Port).To(BeEquivalentTo(port), "the endpoint does not move")
	// The machine waits for the listener, still provisioned.
	g.Expect(h.reconcileMachine(t, cp).RequeueAfter).To(Equal(waitForListener))
	get(t, cp)
	g.Expect(cp.Status.Conditions).To(haveCondition(infrav1.VMProvisionedCondition, metav1.ConditionTrue, infrav1.ProvisionedReason))

	g.Expect(squatter.Close()).To(Succeed())
	res := h.reconcileCluster(t, f.gc)
	g.Expect(res.RequeueAfter).To(BeZero())
	get(t, f.gc)
	g.Expect(f.gc.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason))
	l = mustListener(t, h.harness, f)
	g.Expect(l.Port()).To(Equal(port))
	h.reconcileMachine(t, cp) // re-adds the API server at once (the clock did not move)
	_, err = workloadClient(t, l).CoreV1().ConfigMaps("default").Get(ctx, "kept", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "served again on its port, with its state")
	g.Expect(h.clusterR.portRetries).To(BeEmpty(), "the backoff ends with the bind")
}

// TestUnreadableStateOutranksPortRefusals: a cluster whose state cannot be read is reported
// StateUnreadable also when its port is refused too (another workload cluster's GoofyCluster
// names it, and no record says which held it) or cannot be bound: the state is the more
// fundamental failure, which no port would cure.
func TestUnreadableStateOutranksPortRefusals(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	dir := t.TempDir()
	db, err := storage.Open(dir)
	g.Expect(err).NotTo(HaveOccurred())
	h := newHarnessWith(t, store.NewManager(store.WithStorage(db)))
	f := newFixture(t, newNamespace(t), "torn-port", nil)
	h.provisionCluster(t, f)
	get(t, f.gc)
	key := mux.ClusterKey(f.gc.Namespace, f.cluster.Name)
	endpoint := f.gc.Spec.ControlPlaneEndpoint
	g.Expect(h.mux.Shutdown(ctx)).To(Succeed())
	g.Expect(db.Close()).To(Succeed())
	raw, err := bolt.Open(filepath.Join(dir, storage.FileName), 0o600, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(raw.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(key)).Put([]byte("/namespaces/default"), []byte("p\xff"))
	})).To(Succeed())
	g.Expect(raw.Close()).To(Succeed())

	// Another workload cluster's GoofyCluster names the same port.
	other := newFixture(t, newNamespace(t), "torn-port-other", nil)
	setEndpoint(t, other.gc, endpoint)
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), other.gc) })

	db, err = storage.Open(dir)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = db.Close() })
	h2 := newHarnessWith(t, store.NewManager(store.WithStorage(db)))
	expectUnreadable := func() {
		t.Helper()
		_, err := h2.clusterR.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f.gc)})
		g.Expect(err).To(MatchError(store.ErrStateUnreadable))
		get(t, f.gc)
		for _, c := range []string{infrav1.ReadyCondition, infrav1.LoadBalancerReadyCondition} {
			g.Expect(f.gc.Status.Conditions).To(haveCondition(c, metav1.ConditionFalse, infrav1.StateUnreadableReason), c)
			g.Expect(conditions.Get(f.gc, c).Message).To(ContainSubstring("/namespaces/default"))
		}
		_, served := h2.mux.Listener(key)
		g.Expect(served).To(BeFalse(), "the cluster must not be served without its state")
	}
	expectUnreadable() // the port is contested

	// Its own namespace only (the port is not contested), and another process holds the port.
	h2.clusterR.Client = client.NewNamespacedClient(k8sClient, f.gc.Namespace)
	squatter, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(endpoint.Port))))
	g.Expect(err).NotTo(HaveOccurred())
	defer squatter.Close()
	expectUnreadable()
}
