package controllers

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
)

func TestIPAllocator(t *testing.T) {
	g := NewWithT(t)
	var a ipAllocator

	// Lowest free address first, one per machine, stable for a machine.
	ip0, err := a.allocate("ns/a", "m0", nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ip0).To(Equal(netip.MustParseAddr("10.10.0.10")))
	ip1, _ := a.allocate("ns/a", "m1", nil)
	g.Expect(ip1).To(Equal(netip.MustParseAddr("10.10.0.11")))
	again, _ := a.allocate("ns/a", "m0", nil)
	g.Expect(again).To(Equal(ip0))

	// Clusters are isolated: another cluster starts from the same first address.
	other, _ := a.allocate("ns/b", "m0", nil)
	g.Expect(other).To(Equal(ip0))

	// Addresses recorded elsewhere (another machine's status) are skipped.
	ip2, _ := a.allocate("ns/a", "m2", func(ip netip.Addr) bool { return ip == netip.MustParseAddr("10.10.0.12") })
	g.Expect(ip2).To(Equal(netip.MustParseAddr("10.10.0.13")))

	// Released addresses are reused.
	a.release("ns/a", "m1")
	ip3, _ := a.allocate("ns/a", "m3", nil)
	g.Expect(ip3).To(Equal(ip1))

	// reserve records an address read back from status, and refuses another machine's.
	g.Expect(a.reserve("ns/a", "m4", netip.MustParseAddr("10.10.0.50"))).To(Succeed())
	g.Expect(a.reserve("ns/a", "m4", netip.MustParseAddr("10.10.0.50"))).To(Succeed())
	g.Expect(a.reserve("ns/a", "m5", netip.MustParseAddr("10.10.0.50"))).To(MatchError(ContainSubstring("already used by machine m4")))
	ip4, _ := a.allocate("ns/a", "m4", nil)
	g.Expect(ip4).To(Equal(netip.MustParseAddr("10.10.0.50")))

	// Releasing the last machine of a cluster forgets the cluster.
	a.release("ns/b", "m0")
	g.Expect(a.clusters).NotTo(HaveKey("ns/b"))

	// A full range is an error, not a wrap-around or a duplicate.
	_, err = a.allocate("ns/c", "m0", func(netip.Addr) bool { return true })
	g.Expect(err).To(MatchError(ContainSubstring("no node IP left")))
}

func TestIPAllocatorConcurrent(t *testing.T) {
	g := NewWithT(t)
	var a ipAllocator
	var wg sync.WaitGroup
	ips := make([]netip.Addr, 200)
	for i := range ips {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ip, err := a.allocate("ns/a", fmt.Sprintf("m%d", i), nil)
			if err != nil {
				t.Error(err)
			}
			ips[i] = ip
		}()
	}
	wg.Wait()
	seen := map[netip.Addr]bool{}
	for _, ip := range ips {
		g.Expect(seen).NotTo(HaveKey(ip))
		seen[ip] = true
	}
}
