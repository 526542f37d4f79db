package controllers

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// SecretCache is how the manager caches Secrets: only those of CAPI clusters (the cluster-name
// label), and of those only the cluster and etcd CAs keep their data. The reconcilers read the
// CAs once per control-plane machine; a watch replaces those GETs, and dropping the data of the
// other Secrets (bootstrap data, kubeconfigs, service-account keys) keeps the cache small.
//
// Readers that need another Secret's data use an uncached reader (the manager's API reader).
func SecretCache() cache.ByObject {
	hasCluster, err := labels.NewRequirement(clusterv1.ClusterNameLabel, selection.Exists, nil)
	if err != nil {
		panic(fmt.Sprintf("constant label requirement: %v", err))
	}
	return cache.ByObject{Label: labels.NewSelector().Add(*hasCluster), Transform: KeepCAData}
}

// KeepCAData is the cache transform of SecretCache.
func KeepCAData(obj any) (any, error) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, nil
	}
	s.ManagedFields = nil
	clusterName := s.Labels[clusterv1.ClusterNameLabel]
	if s.Name != secret.Name(clusterName, secret.ClusterCA) && s.Name != secret.Name(clusterName, secret.EtcdCA) {
		s.Data, s.StringData = nil, nil
	}
	return s, nil
}
