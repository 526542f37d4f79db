package mux

import (
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestPortReservation: a reserved port is held in memory only (no listener, no store), the
// reserving UID's claim turns it into the listener, nobody else gets it meanwhile, and a cancel,
// a release or PortReservationTTL frees it.
func TestPortReservation(t *testing.T) {
	g := NewWithT(t)
	m := newTestMux(t, WithPortRange(12700, 12702))
	now := time.Now()
	m.now = func() time.Time { return now }
	hasStore := func(key string) bool { _, ok := m.manager.GetCluster(key); return ok }

	port, err := m.ReserveWorkloadClusterPort("ns/a", "uid-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(port).To(Equal(12700))
	_, listening := m.Listener("ns/a")
	g.Expect(listening).To(BeFalse(), "a reservation is no listener")
	g.Expect(hasStore("ns/a")).To(BeFalse(), "a reservation creates no store")
	again, err := m.ReserveWorkloadClusterPort("ns/a", "uid-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(port), "reserving again returns the same port")
	_, err = m.ReserveWorkloadClusterPort("ns/a", "uid-other")
	g.Expect(errors.Is(err, ErrHeldByAnother)).To(BeTrue(), "got %v", err)

	// Nobody else gets the reserved port: not another cluster's allocation, not a claim on it by
	// another cluster or another UID.
	b, err := m.InitWorkloadClusterListener("ns/b")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b.Port()).To(Equal(12701))
	_, err = m.ClaimWorkloadClusterListener("ns/c", port, "uid-c")
	g.Expect(err).To(HaveOccurred())
	_, err = m.ClaimWorkloadClusterListener("ns/a", port, "uid-other")
	g.Expect(err).To(HaveOccurred())
	_, held := m.OwnerOf("ns/a")
	g.Expect(held).To(BeFalse(), "a failed claim holds nothing")
	_, listening = m.Listener("ns/c")
	g.Expect(listening).To(BeFalse())

	// The reserving UID's claim turns the reservation into the listener.
	l, err := m.ClaimWorkloadClusterListener("ns/a", port, "uid-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l.Port()).To(Equal(port))
	g.Expect(hasStore("ns/a")).To(BeTrue())
	uid, _ := m.OwnerOf("ns/a")
	g.Expect(uid).To(BeEquivalentTo("uid-a"))
	m.CancelWorkloadClusterPort("ns/a", "uid-a") // nothing left to cancel: the listener stays
	_, listening = m.Listener("ns/a")
	g.Expect(listening).To(BeTrue())
	_, err = m.ReserveWorkloadClusterPort("ns/a", "uid-a")
	g.Expect(err).To(HaveOccurred(), "a cluster with a listener reserves nothing")

	// A cancel frees the port: the next reservation gets it.
	d, err := m.ReserveWorkloadClusterPort("ns/d", "uid-d")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d).To(Equal(12702))
	_, err = m.ReserveWorkloadClusterPort("ns/e", "uid-e")
	g.Expect(errors.Is(err, ErrPortRangeExhausted)).To(BeTrue(), "got %v", err)
	m.CancelWorkloadClusterPort("ns/d", "uid-other") // not its reservation
	_, err = m.ReserveWorkloadClusterPort("ns/e", "uid-e")
	g.Expect(errors.Is(err, ErrPortRangeExhausted)).To(BeTrue(), "got %v", err)
	m.CancelWorkloadClusterPort("ns/d", "uid-d")
	e, err := m.ReserveWorkloadClusterPort("ns/e", "uid-e")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(e).To(Equal(d))

	// A reservation left unclaimed expires.
	now = now.Add(PortReservationTTL - time.Second)
	_, err = m.ReserveWorkloadClusterPort("ns/f", "uid-f")
	g.Expect(errors.Is(err, ErrPortRangeExhausted)).To(BeTrue(), "not expired yet: got %v", err)
	now = now.Add(time.Second)
	f, err := m.ReserveWorkloadClusterPort("ns/f", "uid-f")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f).To(Equal(e))
	_, err = m.ClaimWorkloadClusterListener("ns/e", e, "uid-e")
	g.Expect(err).To(HaveOccurred(), "an expired reservation is claimed by nobody")
	g.Expect(hasStore("ns/e")).To(BeFalse())

	// A claim on port 0 takes the UID's reservation; a release drops an unclaimed one.
	l, err = m.ClaimWorkloadClusterListener("ns/f", 0, "uid-f")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l.Port()).To(Equal(f))
	g.Expect(m.DeleteWorkloadClusterListener("ns/f")).To(Succeed())
	g.Expect(m.DeleteWorkloadClusterListener("ns/b")).To(Succeed())
	g2, err := m.ReserveWorkloadClusterPort("ns/g", "uid-g")
	g.Expect(err).NotTo(HaveOccurred())
	released, err := m.ReleaseWorkloadClusterListener("ns/g", "uid-other")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(released).To(BeFalse(), "another UID's reservation is not its to release")
	released, err = m.ReleaseWorkloadClusterListener("ns/g", "uid-g")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(released).To(BeTrue())
	h, err := m.ClaimWorkloadClusterListener("ns/h", g2, "uid-h")
	g.Expect(err).NotTo(HaveOccurred(), "the released reservation's port is free")
	g.Expect(h.Port()).To(Equal(g2))
}
