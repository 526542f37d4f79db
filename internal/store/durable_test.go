package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	. "github.com/onsi/gomega"
	bolt "go.etcd.io/bbolt"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
)

// durableManager opens the state in dir; the returned func closes it (a clean stop: the
// crash case is covered by the apiserver package's SIGKILL test).
func durableManager(t *testing.T, dir string) (*Manager, func()) {
	t.Helper()
	db, err := storage.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return NewManager(WithStorage(db)), func() { _ = db.Close() }
}

func rvOf(t *testing.T, s string) uint64 {
	t.Helper()
	rv, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return rv
}

func TestStateSurvivesRestartWithClientMetadata(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	m, closeDB := durableManager(t, dir)
	c, err := m.AddCluster("ns/a", ClusterOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	cm := configMap("default", "user", map[string]string{"k": "v"})
	cm.Labels = map[string]string{"team": "x"}
	cm.Annotations = map[string]string{"note": "kept"}
	cm.Finalizers = []string{"example.com/hold"}
	created := mustCreate(t, c, cm)
	// A finalizer-held delete leaves the object terminating.
	_, err = c.Delete(configMapsGVR, "default", "user", DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	before := mustGet(t, c, cm).(*corev1.ConfigMap)
	g.Expect(before.DeletionTimestamp).NotTo(BeNil())
	gone := mustCreate(t, c, configMap("default", "gone", nil))
	_, err = c.Delete(configMapsGVR, "default", "gone", DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	node := mustCreate(t, c, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "user", Effect: corev1.TaintEffectNoSchedule}}}})
	lastRV := rvOf(t, node.GetResourceVersion())
	m.DeleteCluster("ns/other") // no state: nothing happens
	closeDB()

	m, closeDB = durableManager(t, dir)
	defer closeDB()
	c, err = m.AddCluster("ns/a", ClusterOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	after := mustGet(t, c, cm).(*corev1.ConfigMap)
	g.Expect(after.UID).To(Equal(created.GetUID()))
	g.Expect(after.ManagedFields).NotTo(BeEmpty())
	// Everything, metadata included (uid, creationTimestamp, resourceVersion, labels, annotations,
	// finalizers, deletionTimestamp, managedFields), as it was; times compare as instants.
	g.Expect(equality.Semantic.DeepEqual(after, before)).To(BeTrue(), "after the restart:\n%v\nbefore:\n%v", after, before)
	g.Expect(exists(c, gone)).To(BeFalse(), "a deleted object stays deleted")
	g.Expect(mustGet(t, c, node).(*corev1.Node).Spec.Taints).To(HaveLen(1))
	// The default namespaces come from disk, not a second time.
	ns, err := c.List(namespacesGVR, "", ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ns.(*corev1.NamespaceList).Items).To(HaveLen(len(defaultNamespaces)))

	// Releasing the finalizer completes the deletion, after the restart.
	upd := after.DeepCopy()
	upd.Finalizers = nil
	_, err = c.Update(configMapsGVR, "default", upd, UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exists(c, cm)).To(BeFalse())

	next := mustCreate(t, c, configMap("default", "new", nil))
	g.Expect(rvOf(t, next.GetResourceVersion())).To(BeNumerically(">", lastRV))
}

func TestResourceVersionsNeverGoBackAcrossRestarts(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run("durable="+strconv.FormatBool(durable), func(t *testing.T) {
			g := NewWithT(t)
			dir := t.TempDir()
			open := func() (*Manager, func()) {
				if durable {
					return durableManager(t, dir)
				}
				return NewManager(), func() {}
			}
			m, closeDB := open()
			c, err := m.AddCluster("ns/a", ClusterOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			var last string
			for i := range 50 {
				last = mustCreate(t, c, configMap("default", "cm"+strconv.Itoa(i), nil)).GetResourceVersion()
			}
			list, err := c.List(configMapsGVR, "default", ListOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			listRV := list.(*corev1.ConfigMapList).ResourceVersion
			g.Expect(listRV).To(Equal(last))
			closeDB()

			// A new life of the store: a new process, or the same one after forgetting the cluster.
			m, closeDB = open()
			defer closeDB()
			c, err = m.AddCluster("ns/a", ClusterOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			first := mustCreate(t, c, configMap("default", "after", nil)).GetResourceVersion()
			g.Expect(rvOf(t, first)).To(BeNumerically(">", rvOf(t, last)))

			// What happened before the restart cannot be replayed: clients relist, as after an
			// etcd compaction.
			_, err = c.Watch(configMapsGVR, "default", ListOptions{ResourceVersion: listRV})
			g.Expect(apierrors.IsResourceExpired(err)).To(BeTrue(), "watch from before the restart: %v", err)
			_, err = c.List(configMapsGVR, "default", ListOptions{ResourceVersion: listRV, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
			g.Expect(apierrors.IsResourceExpired(err)).To(BeTrue(), "exact list from before the restart: %v", err)
			// A list that accepts any newer state is served.
			_, err = c.List(configMapsGVR, "default", ListOptions{ResourceVersion: listRV})
			g.Expect(err).NotTo(HaveOccurred())
			// A watch from the current state gets every later change.
			w, err := c.Watch(configMapsGVR, "default", ListOptions{ResourceVersion: first})
			g.Expect(err).NotTo(HaveOccurred())
			defer w.Stop()
			mustCreate(t, c, configMap("default", "later", nil))
			ev, ok := w.Next(nil)
			g.Expect(ok).To(BeTrue())
			g.Expect(ev.Object.(*corev1.ConfigMap).Name).To(Equal("later"))
		})
	}
}

func TestDeletingAClusterDeletesItsState(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	m, closeDB := durableManager(t, dir)
	for _, n := range []string{"ns/a", "ns/b", "ns/c"} {
		c, err := m.AddCluster(n, ClusterOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		mustCreate(t, c, configMap("default", "x", nil))
	}
	g.Expect(m.DeleteCluster("ns/a")).To(Succeed())
	closeDB()

	m, closeDB = durableManager(t, dir)
	defer closeDB()
	c, err := m.AddCluster("ns/a", ClusterOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exists(c, configMap("default", "x", nil))).To(BeFalse(), "a deleted cluster comes back empty")
	// ns/c was deleted while the process was down: only ns/a and ns/b still exist.
	deleted, err := m.DeleteStateExcept([]string{"ns/b"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(deleted).To(ConsistOf("ns/c"))
	c, err = m.AddCluster("ns/b", ClusterOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exists(c, configMap("default", "x", nil))).To(BeTrue())
}

func TestUnreadableStateFailsOnlyItsCluster(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	m, closeDB := durableManager(t, dir)
	for _, n := range []string{"ns/bad", "ns/good"} {
		c, err := m.AddCluster(n, ClusterOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		mustCreate(t, c, configMap("default", "x", nil))
	}
	closeDB()
	tearConfigMap(t, dir, "ns/bad", "default/x")

	m, closeDB = durableManager(t, dir)
	defer closeDB()
	_, err := m.AddCluster("ns/bad", ClusterOptions{})
	g.Expect(err).To(MatchError(ContainSubstring("decoding /configmaps/default/x")))
	_, loaded := m.GetCluster("ns/bad")
	g.Expect(loaded).To(BeFalse(), "never a silently empty cluster")
	c, err := m.AddCluster("ns/good", ClusterOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exists(c, configMap("default", "x", nil))).To(BeTrue())
}

// TestWritesAfterDeleteAreRefused: a deleted cluster's store, still held by a client (a simulator,
// a request in flight), refuses writes, and its state does not come back on disk.
func TestWritesAfterDeleteAreRefused(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	m, closeDB := durableManager(t, dir)
	c, err := m.AddCluster("ns/gone", ClusterOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	mustCreate(t, c, configMap("default", "before", nil))
	g.Expect(m.DeleteCluster("ns/gone")).To(Succeed())

	_, err = c.Create(configMapsGVR, "default", configMap("default", "after", nil), CreateOptions{})
	g.Expect(apierrors.IsServiceUnavailable(err)).To(BeTrue(), "create on a deleted cluster: %v", err)
	g.Expect(err).To(MatchError(ContainSubstring("workload cluster ns/gone has been deleted")))
	_, err = c.Delete(configMapsGVR, "default", "before", DeleteOptions{})
	g.Expect(apierrors.IsServiceUnavailable(err)).To(BeTrue(), "delete on a deleted cluster: %v", err)
	closeDB()

	db, err := storage.Open(dir)
	g.Expect(err).NotTo(HaveOccurred())
	defer db.Close()
	buckets, err := db.Buckets()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(buckets).NotTo(ContainElement("ns/gone"), "a write after the delete brought the cluster's state back")
}

// TestFailedCommitUndoesWhatTheClusterDerived: a CRD whose commit fails is undone with what the
// cluster derived from it (its kind is not served), and informers, which see changes before the
// disk confirms them, get the reverse change.
func TestFailedCommitUndoesWhatTheClusterDerived(t *testing.T) {
	g := NewWithT(t)
	m, closeDB := durableManager(t, t.TempDir())
	defer closeDB()
	c, err := m.AddCluster("c", ClusterOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	view := map[string]string{} // what an informer's cache holds: name -> resourceVersion
	stop := c.Inform([]schema.GroupResource{crdsGR}, func(ch Change) {
		if ch.New == nil {
			delete(view, ch.Old.GetName())
			return
		}
		view[ch.New.GetName()] = ch.New.GetResourceVersion()
	})
	defer stop()

	m.db.InjectFault(func(string, string) error { return errors.New("injected I/O error") })
	_, err = c.Create(crdsGVR, "", widgetCRD(), CreateOptions{})
	g.Expect(apierrors.IsInternalError(err)).To(BeTrue(), "%v", err)
	m.db.InjectFault(nil)
	g.Expect(view).To(BeEmpty(), "the informer saw the CRD created, then undone")
	_, err = c.Create(widgetsGVR, "default", widget("w", map[string]any{}), CreateOptions{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the undone CRD's kind is not served: %v", err)

	createCRD(t, c)
	g.Expect(view).To(HaveLen(1))
	g.Eventually(func() error {
		_, err := c.Create(widgetsGVR, "default", widget("w", map[string]any{}), CreateOptions{})
		return err
	}).Should(Succeed())
}

// tearConfigMap overwrites the stored ConfigMap key of cluster bucket in the state file in dir
// with bytes that do not decode, as a bad disk block or a bug would. The state must be closed.
func tearConfigMap(t *testing.T, dir, bucket, key string) {
	t.Helper()
	raw, err := bolt.Open(dir+"/"+storage.FileName, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if err := raw.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(bucket)).Put([]byte("/configmaps/"+key), []byte("p\xff\xff"))
	}); err != nil {
		t.Fatal(err)
	}
}

// TestSimulatorReadsDoNotForceCommits: the simulator's client (WithoutSyncWait) reads its own
// queued writes at once, so its create-then-read steps queue writes that share commits, where
// each read used to wait for (and so force) a commit of its own; a client's read then waits
// until all of them are on disk.
func TestSimulatorReadsDoNotForceCommits(t *testing.T) {
	g := NewWithT(t)
	db, err := storage.Open(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = db.Close() }()
	c, err := NewManager(WithStorage(db)).AddCluster("ns/a", ClusterOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	ctx := context.Background()
	sim := c.Client(WithoutManagedFields(), WithoutSyncWait())
	before := db.Stats()

	const steps = 20
	for i := range steps {
		g.Expect(sim.Create(ctx, configMap("default", fmt.Sprintf("cm-%d", i), nil))).To(Succeed())
		got := &corev1.ConfigMap{}
		g.Expect(sim.Get(ctx, client.ObjectKey{Namespace: "default", Name: fmt.Sprintf("cm-%d", i)}, got)).To(Succeed())
		list := &corev1.ConfigMapList{}
		g.Expect(sim.List(ctx, list, client.InNamespace("default"))).To(Succeed())
		g.Expect(list.Items).To(HaveLen(i + 1))
	}
	// A client's read shows them only once they are on disk.
	list := &corev1.ConfigMapList{}
	g.Expect(c.Client().List(ctx, list, client.InNamespace("default"))).To(Succeed())
	g.Expect(list.Items).To(HaveLen(steps))
	after := db.Stats()
	g.Expect(after.Writes - before.Writes).To(BeNumerically(">=", steps))
	g.Expect(after.Batches-before.Batches).To(BeNumerically("<", steps/2), "commits for %d writes", after.Writes-before.Writes)
}
