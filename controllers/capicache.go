package controllers

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// MachineCache and ClusterCache are how the manager caches CAPI's Machines and Clusters: without
// the parts of their status no reconciler here reads. CAPI rewrites both statuses many times
// while a cluster provisions (conditions, their v1beta1 copies, addresses, node info, counters);
// every Machine and Cluster of the management cluster is in the cache for the process's life,
// and the status is most of each. Readers that need a status read it uncached (the manager's API
// reader).
func MachineCache() cache.ByObject { return cache.ByObject{Transform: TrimMachine} }

// ClusterCache: see MachineCache.
func ClusterCache() cache.ByObject { return cache.ByObject{Transform: TrimCluster} }

// TrimMachine is MachineCache's transform: a Machine's metadata (managed fields aside) and spec.
func TrimMachine(obj any) (any, error) {
	if m, ok := obj.(*clusterv1.Machine); ok {
		m.ManagedFields = nil
		m.Status = clusterv1.MachineStatus{}
	}
	return obj, nil
}

// TrimCluster is ClusterCache's transform: a Cluster's metadata (managed fields aside), spec, and
// of its status what the GoofyMachine reconciler waits on (clusterGatesOf): the initialization
// flags and the ControlPlaneInitialized condition.
func TrimCluster(obj any) (any, error) {
	if c, ok := obj.(*clusterv1.Cluster); ok {
		c.ManagedFields = nil
		kept := clusterv1.ClusterStatus{Initialization: c.Status.Initialization}
		if i := slices.IndexFunc(c.Status.Conditions, func(cond metav1.Condition) bool {
			return cond.Type == clusterv1.ClusterControlPlaneInitializedCondition
		}); i >= 0 {
			kept.Conditions = []metav1.Condition{c.Status.Conditions[i]}
		}
		c.Status = kept
	}
	return obj, nil
}
