package controllers

import (
	"context"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	bolt "go.etcd.io/bbolt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// TestUnreadableStateIsACondition: a cluster whose state on disk cannot be read stays down with
// a StateUnreadable condition saying why; it is never served empty.
func TestUnreadableStateIsACondition(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	dir := t.TempDir()
	db, err := storage.Open(dir)
	g.Expect(err).NotTo(HaveOccurred())
	h := newHarnessWith(t, store.NewManager(store.WithStorage(db)))
	f := newFixture(t, newNamespace(t), "torn", nil)
	h.provisionCluster(t, f)
	key := mux.ClusterKey(f.gc.Namespace, f.cluster.Name)
	g.Expect(h.mux.Shutdown(ctx)).To(Succeed())
	g.Expect(db.Close()).To(Succeed())

	// Tear a stored object.
	raw, err := bolt.Open(filepath.Join(dir, storage.FileName), 0o600, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(raw.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(key)).Put([]byte("/namespaces/default"), []byte("p\xff"))
	})).To(Succeed())
	g.Expect(raw.Close()).To(Succeed())

	db, err = storage.Open(dir)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = db.Close() })
	h2 := newHarnessWith(t, store.NewManager(store.WithStorage(db)))
	// Its own namespace only, as in TestEndpointRepair: other tests' GoofyClusters name this port too.
	h2.clusterR.Client = client.NewNamespacedClient(k8sClient, f.gc.Namespace)
	_, err = h2.clusterR.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f.gc)})
	g.Expect(err).To(MatchError(ContainSubstring("unreadable")))
	get(t, f.gc)
	ready := conditions.Get(f.gc, infrav1.ReadyCondition)
	g.Expect(ready).NotTo(BeNil())
	g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(ready.Reason).To(Equal(infrav1.StateUnreadableReason))
	g.Expect(ready.Message).To(ContainSubstring("/namespaces/default"))
	_, served := h2.mux.Listener(key)
	g.Expect(served).To(BeFalse(), "the cluster must not be served without its state")
}
