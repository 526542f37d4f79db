package store

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
)

// TestStateBelongsToItsOwner (issue 27 item 9): a cluster's state on disk is its owner's (the
// UID of its GoofyCluster), not its name's. Across restarts of the manager on the same file, the
// same owner gets the state back; a new owner of the same name (the GoofyCluster deleted while
// the manager was down, and created again) starts with the default namespaces only, and the
// earlier state is gone from disk; a cluster added without an owner takes the state as it is.
func TestStateBelongsToItsOwner(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	const name = "ns/foo"
	old, fresh := configMap("default", "old", nil), configMap("default", "fresh", nil)
	life := func(owner types.UID, do func(c *Cluster)) {
		t.Helper()
		m, closeDB := durableManager(t, dir)
		defer closeDB()
		c, err := m.AddCluster(name, ClusterOptions{Owner: owner})
		g.Expect(err).NotTo(HaveOccurred())
		do(c)
		m.Close()
	}
	life("uid-1", func(c *Cluster) { mustCreate(t, c, old) })
	life("uid-1", func(c *Cluster) {
		g.Expect(exists(c, old)).To(BeTrue(), "the same owner gets its state back")
	})
	life("uid-2", func(c *Cluster) {
		g.Expect(exists(c, old)).To(BeFalse(), "a new owner of the same name must not get the earlier cluster's objects")
		ns, err := c.List(namespacesGVR, "", ListOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ns.(*corev1.NamespaceList).Items).To(HaveLen(len(defaultNamespaces)), "the new owner starts as a new cluster")
		mustCreate(t, c, fresh)
	})
	life("", func(c *Cluster) {
		g.Expect(exists(c, old)).To(BeFalse(), "the earlier owner's state is gone from disk")
		g.Expect(exists(c, fresh)).To(BeTrue(), "without an owner the state is taken as it is")
	})
	life("uid-2", func(c *Cluster) {
		g.Expect(exists(c, fresh)).To(BeTrue())
	})
	m, closeDB := durableManager(t, dir)
	defer closeDB()
	uid, ok := m.ClusterOwner(name)
	g.Expect(ok).To(BeTrue())
	g.Expect(uid).To(BeEquivalentTo("uid-2"))
}

// TestStateWithoutOwnerIsAdopted: state written without an owner's record (by a version that did
// not record owners) is adopted by the first owner that adds the cluster, which records itself:
// nothing is lost on upgrade, and from then on the state is that owner's.
func TestStateWithoutOwnerIsAdopted(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	const name = "ns/legacy"
	cm := configMap("default", "kept", nil)

	m, closeDB := durableManager(t, dir)
	c, err := m.AddCluster(name, ClusterOptions{}) // as an older version wrote it: no owner
	g.Expect(err).NotTo(HaveOccurred())
	mustCreate(t, c, cm)
	closeDB()

	m, closeDB = durableManager(t, dir)
	_, ok := m.ClusterOwner(name)
	g.Expect(ok).To(BeFalse(), "no owner recorded")
	c, err = m.AddCluster(name, ClusterOptions{Owner: "uid-1"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exists(c, cm)).To(BeTrue(), "state without an owner's record is adopted, not dropped")
	closeDB()

	m, closeDB = durableManager(t, dir)
	uid, ok := m.ClusterOwner(name)
	g.Expect(ok).To(BeTrue(), "the adopting owner is recorded on disk")
	g.Expect(uid).To(BeEquivalentTo("uid-1"))
	c, err = m.AddCluster(name, ClusterOptions{Owner: "uid-2"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exists(c, cm)).To(BeFalse(), "once adopted, the state is uid-1's")
	closeDB()
}

// TestSetClusterOwnerKeepsState: a workload cluster handed to another object (the mux's transfer)
// keeps its state, which is the new owner's from then on, across a restart too.
func TestSetClusterOwnerKeepsState(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	const name = "ns/handed"
	cm := configMap("default", "kept", nil)
	m, closeDB := durableManager(t, dir)
	c, err := m.AddCluster(name, ClusterOptions{Owner: "uid-1"})
	g.Expect(err).NotTo(HaveOccurred())
	mustCreate(t, c, cm)
	g.Expect(m.SetClusterOwner(name, "uid-2")()).To(Succeed())
	closeDB()

	m, closeDB = durableManager(t, dir)
	defer closeDB()
	c, err = m.AddCluster(name, ClusterOptions{Owner: "uid-2"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exists(c, cm)).To(BeTrue())
}

// TestCheckStateReadsWithoutLoading: CheckState tells why a cluster's state cannot be loaded
// (ErrStateUnreadable, naming the key), without adding the cluster and without writing; state of
// another owner is not the asker's to read (it would be deleted), readable state and no state
// are fine.
func TestCheckStateReadsWithoutLoading(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	m, closeDB := durableManager(t, dir)
	for _, n := range []string{"ns/bad", "ns/good"} {
		c, err := m.AddCluster(n, ClusterOptions{Owner: types.UID("uid-" + n)})
		g.Expect(err).NotTo(HaveOccurred())
		mustCreate(t, c, configMap("default", "x", nil))
	}
	closeDB()
	tearConfigMap(t, dir, "ns/bad", "default/x")

	db, err := storage.Open(dir)
	g.Expect(err).NotTo(HaveOccurred())
	defer db.Close()
	m = NewManager(WithStorage(db))
	err = m.CheckState("ns/bad", "uid-ns/bad")
	g.Expect(err).To(MatchError(ErrStateUnreadable))
	g.Expect(err).To(MatchError(ContainSubstring("decoding /configmaps/default/x")))
	g.Expect(m.CheckState("ns/bad", "")).To(MatchError(ErrStateUnreadable), "no owner given: the state is read as it is")
	g.Expect(m.CheckState("ns/bad", "uid-other")).To(Succeed(), "another owner's state is not the asker's")
	g.Expect(m.CheckState("ns/good", "uid-ns/good")).To(Succeed())
	g.Expect(m.CheckState("ns/none", "uid-none")).To(Succeed())
	g.Expect(m.ClusterNames()).To(BeEmpty(), "checking adds no cluster")
	g.Expect(db.Stats().Writes).To(BeZero(), "checking writes nothing")

	_, err = m.AddCluster("ns/bad", ClusterOptions{Owner: "uid-ns/bad"})
	g.Expect(err).To(MatchError(ErrStateUnreadable))
	c, err := m.AddCluster("ns/good", ClusterOptions{Owner: "uid-ns/good"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exists(c, configMap("default", "x", nil))).To(BeTrue())
	g.Expect(m.CheckState("ns/good", "uid-ns/good")).To(Succeed())
}
