package mux

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// A cluster's store is created with the mux's mutex released: while its first write waits for the
// disk, the mux answers about the other clusters and sets others up, on other ports, and the
// calls about that cluster wait for its set-up to end.
func TestSetUpDoesNotHoldTheMux(t *testing.T) {
	g := NewWithT(t)
	db, err := storage.Open(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = db.Close() })
	m, err := NewWorkloadClustersMux(store.NewManager(store.WithStorage(db)), "127.0.0.1", WithPortRange(12710, 12719))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	a, err := m.InitWorkloadClusterListener("ns/a")
	g.Expect(err).NotTo(HaveOccurred())

	// The disk holds ns/slow's first write (and every write after it) until released.
	committing, release := db.HoldCommits("ns/slow")
	t.Cleanup(release)
	type result struct {
		l   *WorkloadClusterListener
		err error
	}
	initIn := func(name string) chan result {
		ch := make(chan result, 1)
		go func() {
			l, err := m.InitWorkloadClusterListener(name)
			ch <- result{l, err}
		}()
		return ch
	}
	slow := initIn("ns/slow")
	g.Eventually(committing, 5*time.Second).Should(BeClosed())

	answered := make(chan struct{})
	go func() {
		defer close(answered)
		_, _ = m.Listener("ns/a")
		_ = m.Describe()
		_, _, _ = m.HeldEndpoint("ns/a")
	}()
	g.Eventually(answered, 5*time.Second).Should(BeClosed(), "the mux is held while a store is created")
	other := initIn("ns/b")
	again := initIn("ns/slow")
	g.Consistently(again, 200*time.Millisecond).ShouldNot(Receive(), "a second set-up of ns/slow did not wait for the first")

	release()
	var rs, ro, ra result
	g.Eventually(slow, 5*time.Second).Should(Receive(&rs))
	g.Eventually(other, 5*time.Second).Should(Receive(&ro))
	g.Eventually(again, 5*time.Second).Should(Receive(&ra))
	g.Expect(rs.err).NotTo(HaveOccurred())
	g.Expect(ro.err).NotTo(HaveOccurred())
	g.Expect(ra.err).NotTo(HaveOccurred())
	g.Expect(ra.l).To(BeIdenticalTo(rs.l), "set up twice")
	g.Expect([]int{a.Port(), rs.l.Port(), ro.l.Port()}).To(ConsistOf(12710, 12711, 12712), "a port given twice")
}
