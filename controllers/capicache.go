package controllers

import (
	"net/http"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/cachetrim"
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

// CacheTransport is the HTTP transport of the manager's cache: next, leaving out of the JSON
// lists and watch events it receives what the cache's transforms throw away (every object's
// managed fields, cache.TransformStripManagedFields; what TrimMachine and TrimCluster drop, a
// Cluster's conditions but ControlPlaneInitialized included),
// so that it is never decoded (package cachetrim has the figures). What it leaves out must
// stay within what they drop: the transforms decide what the cache holds.
func CacheTransport(next http.RoundTripper) http.RoundTripper {
	metadata := cachetrim.Trim{Drop: []string{"managedFields"}}
	return &cachetrim.Transport{
		Next:   next,
		Object: cachetrim.Trim{Within: map[string]cachetrim.Trim{"metadata": metadata}},
		ByResource: map[schema.GroupResource]cachetrim.Trim{
			{Group: clusterv1.GroupVersion.Group, Resource: "machines"}: {
				Drop:   []string{"status"},
				Within: map[string]cachetrim.Trim{"metadata": metadata},
			},
			{Group: clusterv1.GroupVersion.Group, Resource: "clusters"}: {Within: map[string]cachetrim.Trim{
				"metadata": metadata,
				"status": {
					Only: []string{"initialization", "conditions"},
					Select: map[string]cachetrim.Selection{"conditions": {
						Member: "type", Values: []string{clusterv1.ClusterControlPlaneInitializedCondition},
					}},
				},
			}},
		},
	}
}
