package controllers

import (
	"fmt"
	"net/netip"
	"sync"
)

// nodeIPBase is the simulated node network: every workload cluster gets addresses from
// 10.10.0.0/16, unique inside the cluster (clusters are isolated, so ranges may overlap).
var nodeIPBase = netip.MustParseAddr("10.10.0.10")

const nodeIPCount = 65000

// ipAllocator hands out node IPs per workload cluster, to owners: the UIDs of the objects the
// nodes are provisioned for (nodeProvisioner). Allocations are recorded in the GoofyMachines'
// status, so after a restart machines re-register their own IPs first.
type ipAllocator struct {
	mu       sync.Mutex
	clusters map[string]map[netip.Addr]string // cluster key -> ip -> machine
}

// reserve records ip for machine (e.g. read back from status); it fails if another machine has it.
func (a *ipAllocator) reserve(cluster, machine string, ip netip.Addr) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	used := a.usedLocked(cluster)
	if owner, ok := used[ip]; ok && owner != machine {
		return fmt.Errorf("IP %s is already used by machine %s", ip, owner)
	}
	used[ip] = machine
	return nil
}

// allocate returns machine's IP, taking the lowest free one the first time.
func (a *ipAllocator) allocate(cluster, machine string, taken func(netip.Addr) bool) (netip.Addr, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	used := a.usedLocked(cluster)
	for ip, owner := range used {
		if owner == machine {
			return ip, nil
		}
	}
	ip := nodeIPBase
	for i := 0; i < nodeIPCount; i++ {
		if _, ok := used[ip]; !ok && (taken == nil || !taken(ip)) {
			used[ip] = machine
			return ip, nil
		}
		ip = ip.Next()
	}
	return netip.Addr{}, fmt.Errorf("no node IP left for cluster %s", cluster)
}

func (a *ipAllocator) release(cluster, machine string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	used := a.clusters[cluster]
	for ip, owner := range used {
		if owner == machine {
			delete(used, ip)
		}
	}
	if len(used) == 0 {
		delete(a.clusters, cluster)
	}
}

func (a *ipAllocator) usedLocked(cluster string) map[netip.Addr]string {
	if a.clusters == nil {
		a.clusters = map[string]map[netip.Addr]string{}
	}
	used, ok := a.clusters[cluster]
	if !ok {
		used = map[netip.Addr]string{}
		a.clusters[cluster] = used
	}
	return used
}
