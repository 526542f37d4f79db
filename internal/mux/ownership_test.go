package mux

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

func ownedCluster(ns, name string, port int, uid types.UID) infrav1.GoofyCluster {
	gc := goofyCluster(ns, name, port)
	gc.UID = uid
	return gc
}

// TestHotRestartPortsGoToTheirHolders: after a restart a port goes only to the workload cluster
// whose record on disk says it held it, whatever the spec of another GoofyCluster says and
// whatever the order of the list: a cluster whose spec names another cluster's port, a port
// other than the one it held, or a port outside the range gets no listener, at the restart and
// at its claims after it.
func TestHotRestartPortsGoToTheirHolders(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	const lo, hi = 12800, 12809
	open := func() (*WorkloadClustersMux, func()) {
		db, err := storage.Open(dir)
		g.Expect(err).NotTo(HaveOccurred())
		stores := store.NewManager(store.WithStorage(db))
		m, err := NewWorkloadClustersMux(stores, "127.0.0.1", WithPortRange(lo, hi))
		g.Expect(err).NotTo(HaveOccurred())
		return m, func() {
			g.Expect(m.Shutdown(context.Background())).To(Succeed())
			stores.Close()
			g.Expect(db.Close()).To(Succeed())
		}
	}

	m, stop := open()
	a, err := m.ClaimWorkloadClusterListener("ns/a", 0, "uid-a")
	g.Expect(err).NotTo(HaveOccurred())
	b, err := m.ClaimWorkloadClusterListener("ns/b", 0, "uid-b")
	g.Expect(err).NotTo(HaveOccurred())
	portA, portB := a.Port(), b.Port()
	holder, uid, held := m.PortHolder(portA)
	g.Expect([]any{holder, uid, held}).To(Equal([]any{"ns/a", types.UID("uid-a"), true}))
	stop()

	victim := ownedCluster("ns", "a", portA, "uid-a")
	thief := ownedCluster("ns", "b", portA, "uid-b")    // held portB, its spec now says portA
	newcomer := ownedCluster("ns", "c", portA, "uid-c") // never held a port
	outside := ownedCluster("ns", "d", hi+1, "uid-d")   // outside the range, no record
	for _, order := range [][]infrav1.GoofyCluster{{victim, thief, newcomer, outside}, {outside, newcomer, thief, victim}} {
		t.Run(fmt.Sprintf("%s first", order[0].Labels["cluster.x-k8s.io/cluster-name"]), func(t *testing.T) {
			g := NewWithT(t)
			m, stop := open()
			defer stop()
			err := m.HotRestart(&infrav1.GoofyClusterList{Items: slices.Clone(order)})
			g.Expect(errors.Is(err, ErrPortNotHeld)).To(BeTrue(), "got %v", err)
			for _, refused := range []string{"ns/b", "ns/c", "ns/d"} {
				g.Expect(err.Error()).To(ContainSubstring("workload cluster " + refused + ":"))
				_, ok := m.Listener(refused)
				g.Expect(ok).To(BeFalse(), refused)
			}
			l, ok := m.Listener("ns/a")
			g.Expect(ok).To(BeTrue())
			g.Expect(l.Port()).To(Equal(portA))
			g.Expect(ownerOf(m, "ns/a")).To(BeEquivalentTo("uid-a"))

			// The reconcilers' claims after the restart are refused the same way.
			_, err = m.ClaimWorkloadClusterListener("ns/b", portA, "uid-b")
			g.Expect(errors.Is(err, ErrPortNotHeld)).To(BeTrue(), "got %v", err)
			g.Expect(err.Error()).To(ContainSubstring(fmt.Sprintf("held port %d, not %d", portB, portA)))
			_, err = m.ClaimWorkloadClusterListener("ns/c", portA, "uid-c")
			g.Expect(errors.Is(err, ErrPortNotHeld)).To(BeTrue(), "got %v", err)
			g.Expect(err.Error()).NotTo(ContainSubstring("ns/a"), "the holder is not named to another cluster")
			_, err = m.ClaimWorkloadClusterListener("ns/d", hi+1, "uid-d")
			g.Expect(errors.Is(err, ErrPortNotHeld)).To(BeTrue(), "got %v", err)
			// Nobody is handed the port b held, which stays b's.
			_, err = m.ClaimWorkloadClusterListener("ns/c", portB, "uid-c")
			g.Expect(errors.Is(err, ErrPortNotHeld)).To(BeTrue(), "got %v", err)
			for i := range hi - lo {
				if f, err := m.InitWorkloadClusterListener(fmt.Sprintf("ns/fill-%d", i)); err == nil {
					g.Expect(f.Port()).NotTo(Equal(portB))
				}
			}
		})
	}
	// Once b's spec names its own port again, b is served there.
	m, stop = open()
	defer stop()
	err = m.HotRestart(&infrav1.GoofyClusterList{Items: []infrav1.GoofyCluster{ownedCluster("ns", "b", portB, "uid-b"), victim}})
	g.Expect(err).NotTo(HaveOccurred())
	l, ok := m.Listener("ns/b")
	g.Expect(ok).To(BeTrue())
	g.Expect(l.Port()).To(Equal(portB))
}

// TestHotRestartContestedPortWithoutRecord: with no record (state in memory only), a port that the
// GoofyClusters of two workload clusters record goes to neither, in either order.
func TestHotRestartContestedPortWithoutRecord(t *testing.T) {
	for _, first := range []string{"x", "y"} {
		t.Run(first+" first", func(t *testing.T) {
			g := NewWithT(t)
			m := newTestMux(t, WithPortRange(12810, 12819))
			x, y := ownedCluster("ns", "x", 12811, "uid-x"), ownedCluster("ns", "y", 12811, "uid-y")
			items := []infrav1.GoofyCluster{x, y}
			if first == "y" {
				items = []infrav1.GoofyCluster{y, x}
			}
			err := m.HotRestart(&infrav1.GoofyClusterList{Items: items})
			g.Expect(errors.Is(err, ErrPortNotHeld)).To(BeTrue(), "got %v", err)
			g.Expect(m.Listeners()).To(BeEmpty())
		})
	}
}

func ownerOf(m *WorkloadClustersMux, key string) types.UID {
	uid, _ := m.OwnerOf(key)
	return uid
}
