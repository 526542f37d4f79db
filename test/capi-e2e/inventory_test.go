package capie2e

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	clusterctlcluster "sigs.k8s.io/cluster-api/cmd/clusterctl/client/cluster"
	clusterctlconfig "sigs.k8s.io/cluster-api/cmd/clusterctl/client/config"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/test/e2e/harness"
)

// inventoryProvider is one provider the plane runs, as `clusterctl init` would have recorded it.
type inventoryProvider struct {
	name, namespace, version string
	typ                      clusterctlv1.ProviderType
	groups                   []string // API groups of the provider's CRDs
}

var planeProviders = []inventoryProvider{
	{"cluster-api", "capi-system", harness.CAPIVersion, clusterctlv1.CoreProviderType,
		[]string{"cluster.x-k8s.io", "addons.cluster.x-k8s.io", "ipam.cluster.x-k8s.io", "runtime.cluster.x-k8s.io"}},
	{"kubeadm", "capi-kubeadm-bootstrap-system", harness.CAPIVersion, clusterctlv1.BootstrapProviderType,
		[]string{"bootstrap.cluster.x-k8s.io"}},
	{"kubeadm", "capi-kubeadm-control-plane-system", harness.CAPIVersion, clusterctlv1.ControlPlaneProviderType,
		[]string{"controlplane.cluster.x-k8s.io"}},
	{"goofy", "goofy-system", harness.GoofyVersion, clusterctlv1.InfrastructureProviderType,
		[]string{"infrastructure.cluster.x-k8s.io"}},
}

// registerClusterctlInventory makes the plane look as `clusterctl init` leaves a management
// cluster: every provider CRD carries clusterctl's labels (the framework finds CAPI's types, to
// dump them and to walk the owner graph, by cluster.x-k8s.io/provider), and clusterctl's
// inventory holds one Provider per provider (clusterctl describe, move and the default
// infrastructure provider read it). The managers themselves already run as processes.
func registerClusterctlInventory(ctx context.Context, kubeconfig, clusterctlConfig string, c client.Client) error {
	byGroup := map[string]inventoryProvider{}
	for _, p := range planeProviders {
		for _, g := range p.groups {
			byGroup[g] = p
		}
	}
	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := c.List(ctx, &crds); err != nil {
		return err
	}
	for i := range crds.Items {
		crd := &crds.Items[i]
		p, ok := byGroup[crd.Spec.Group]
		if !ok {
			continue
		}
		patch := client.MergeFrom(crd.DeepCopy())
		if crd.Labels == nil {
			crd.Labels = map[string]string{}
		}
		crd.Labels[clusterctlv1.ClusterctlLabel] = ""
		crd.Labels[clusterv1.ProviderNameLabel] = clusterctlv1.ManifestLabel(p.name, p.typ)
		if err := c.Patch(ctx, crd, patch); err != nil {
			return fmt.Errorf("labelling CRD %s: %w", crd.Name, err)
		}
	}

	cfg, err := clusterctlconfig.New(ctx, clusterctlConfig)
	if err != nil {
		return err
	}
	inventory := clusterctlcluster.New(clusterctlcluster.Kubeconfig{Path: kubeconfig}, cfg).ProviderInventory()
	if err := inventory.EnsureCustomResourceDefinitions(ctx); err != nil {
		return err
	}
	for _, p := range planeProviders {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.namespace}}
		if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		label := clusterctlv1.ManifestLabel(p.name, p.typ)
		if err := inventory.Create(ctx, clusterctlv1.Provider{
			ObjectMeta: metav1.ObjectMeta{Namespace: p.namespace, Name: label, Labels: map[string]string{
				clusterctlv1.ClusterctlLabel:     "",
				clusterv1.ProviderNameLabel:      label,
				clusterctlv1.ClusterctlCoreLabel: clusterctlv1.ClusterctlCoreLabelInventoryValue,
			}},
			ProviderName: p.name,
			Type:         string(p.typ),
			Version:      p.version,
		}); err != nil {
			return fmt.Errorf("recording provider %s: %w", label, err)
		}
	}
	return nil
}
