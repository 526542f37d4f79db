package store

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
)

// While AddCluster waits for a new cluster's first writes to be on disk, the manager answers
// about the other clusters; the calls about the one being added wait for it, and a second
// AddCluster of it finds it added.
func TestAddClusterDoesNotHoldTheManager(t *testing.T) {
	g := NewWithT(t)
	db, err := storage.Open(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = db.Close() })
	m := NewManager(WithStorage(db))
	_, err = m.AddCluster("ns/a", ClusterOptions{Owner: "uid-a"})
	g.Expect(err).NotTo(HaveOccurred())

	committing, release := db.HoldCommits("ns/slow")
	t.Cleanup(release)
	added := make(chan error, 1)
	go func() {
		_, err := m.AddCluster("ns/slow", ClusterOptions{Owner: "uid-slow"})
		added <- err
	}()
	g.Eventually(committing, 5*time.Second).Should(BeClosed())

	answered := make(chan struct{})
	go func() {
		defer close(answered)
		_, _ = m.GetCluster("ns/a")
		_ = m.ClusterNames()
		_, _ = m.ClusterOwner("ns/a")
	}()
	g.Eventually(answered, 5*time.Second).Should(BeClosed(), "the manager is held while a cluster's first writes wait for the disk")
	again := make(chan error, 1)
	go func() {
		_, err := m.AddCluster("ns/slow", ClusterOptions{Owner: "uid-slow"})
		again <- err
	}()
	owner := make(chan string, 1)
	go func() {
		uid, _ := m.ClusterOwner("ns/slow")
		owner <- string(uid)
	}()
	g.Consistently(again, 200*time.Millisecond).ShouldNot(Receive(), "a second AddCluster did not wait for the first")
	g.Expect(owner).NotTo(Receive(), "the owner was told before the cluster was added")

	release()
	g.Eventually(added, 5*time.Second).Should(Receive(BeNil()))
	var err2 error
	g.Eventually(again, 5*time.Second).Should(Receive(&err2))
	g.Expect(err2).To(MatchError(ContainSubstring("already exists")))
	g.Eventually(owner, 5*time.Second).Should(Receive(Equal("uid-slow")))
}
