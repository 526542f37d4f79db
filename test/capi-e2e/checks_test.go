package capie2e

import (
	. "github.com/onsi/ginkgo/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlcluster "sigs.k8s.io/cluster-api/cmd/clusterctl/client/cluster"
	"sigs.k8s.io/cluster-api/test/framework"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
)

// Goofy's kinds in the owner graph, with the owners and finalizers CAPI's contract gives them
// (what the framework's DevInfra* maps say of CAPD's kinds).
var (
	clusterOwner      = metav1.OwnerReference{Kind: "Cluster", APIVersion: clusterv1.GroupVersion.String()}
	clusterController = metav1.OwnerReference{Kind: "Cluster", APIVersion: clusterv1.GroupVersion.String(), Controller: ptr.To(true)}
	clusterClassOwner = metav1.OwnerReference{Kind: "ClusterClass", APIVersion: clusterv1.GroupVersion.String()}
	machineController = metav1.OwnerReference{Kind: "Machine", APIVersion: clusterv1.GroupVersion.String(), Controller: ptr.To(true)}
)

type ownerAssertions = map[string]func(types.NamespacedName, []metav1.OwnerReference) error

func goofyOwnerReferenceAssertions(topologyManaged bool) ownerAssertions {
	goofyClusterOwner := clusterOwner
	if topologyManaged {
		goofyClusterOwner = clusterController
	}
	return ownerAssertions{
		// A GoofyMachine is owned and controlled by its Machine.
		"GoofyMachine": func(_ types.NamespacedName, owners []metav1.OwnerReference) error {
			return framework.HasExactOwners(owners, machineController)
		},
		// Templates of a ClusterClass are owned by it; those the topology controller makes for
		// one Cluster, and those of a plain template, by the Cluster.
		"GoofyMachineTemplate": func(_ types.NamespacedName, owners []metav1.OwnerReference) error {
			return framework.HasOneOfExactOwners(owners, []metav1.OwnerReference{clusterOwner}, []metav1.OwnerReference{clusterClassOwner})
		},
		"GoofyCluster": func(_ types.NamespacedName, owners []metav1.OwnerReference) error {
			return framework.HasExactOwners(owners, goofyClusterOwner)
		},
		"GoofyClusterTemplate": func(_ types.NamespacedName, owners []metav1.OwnerReference) error {
			return framework.HasExactOwners(owners, clusterClassOwner)
		},
	}
}

var goofyFinalizersAssertion = map[string]func(types.NamespacedName) []string{
	"GoofyMachine": func(types.NamespacedName) []string { return []string{infrav1.MachineFinalizer} },
	"GoofyCluster": func(types.NamespacedName) []string { return []string{infrav1.ClusterFinalizer} },
}

// checkOwnersFinalizersAndStability is what CAPI's own QuickStart run checks once the machines are
// provisioned: owner references and finalizers are as the contract says and come back when
// removed, and resourceVersions settle (no reconcile keeps writing once all is provisioned).
func checkOwnersFinalizersAndStability(topologyManaged bool) func(framework.ClusterProxy, string, string) {
	return func(proxy framework.ClusterProxy, namespace, clusterName string) {
		filter := clusterctlcluster.FilterClusterObjectsWithNameFilter(clusterName)
		owners := []ownerAssertions{
			framework.CoreOwnerReferenceAssertion,
			framework.ExpOwnerReferenceAssertions,
			goofyOwnerReferenceAssertions(topologyManaged),
			framework.KubeadmBootstrapOwnerReferenceAssertions,
			framework.KubeadmControlPlaneOwnerReferenceAssertions(topologyManaged),
			framework.KubernetesReferenceAssertions,
		}
		By("Checking that owner references are resilient")
		framework.ValidateOwnerReferencesResilience(ctx, proxy, namespace, clusterName, filter, owners...)
		By("Checking that owner references are updated to the correct API version")
		framework.ValidateOwnerReferencesOnUpdate(ctx, proxy, namespace, clusterName, filter, owners...)
		coreFinalizers := framework.CoreFinalizersAssertionWithLegacyClusters
		if topologyManaged {
			coreFinalizers = framework.CoreFinalizersAssertionWithClassyClusters
		}
		By("Checking that finalizers are resilient")
		framework.ValidateFinalizersResilience(ctx, proxy, namespace, clusterName, filter,
			coreFinalizers,
			framework.KubeadmControlPlaneFinalizersAssertion,
			framework.ExpFinalizersAssertion,
			goofyFinalizersAssertion,
		)
		By("Checking that resourceVersions are stable")
		framework.ValidateResourceVersionStable(ctx, framework.ValidateResourceVersionStableInput{
			ClusterProxy:             proxy,
			Namespace:                namespace,
			OwnerGraphFilterFunction: filter,
			WaitToBecomeStable:       e2eConfig.GetIntervals("quick-start", "wait-resource-versions-become-stable"),
			WaitToRemainStable:       e2eConfig.GetIntervals("quick-start", "wait-resource-versions-remain-stable"),
		})
	}
}
