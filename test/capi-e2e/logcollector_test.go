package capie2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// goofyLogCollector is the framework's ClusterLogCollector for Goofy. A simulated machine has no
// journal or container logs; what there is to collect is its GoofyMachine (phases, conditions,
// addresses) and, from the workload cluster's own API, its Node and the pods bound to it.
type goofyLogCollector struct{}

func (goofyLogCollector) CollectMachineLog(ctx context.Context, mgmt client.Client, m *clusterv1.Machine, outputPath string) error {
	if err := os.MkdirAll(outputPath, 0o755); err != nil {
		return err
	}
	ref := m.Spec.InfrastructureRef
	if ref.Name == "" {
		return fmt.Errorf("machine %s has no infrastructure reference", m.Name)
	}
	infra := &unstructured.Unstructured{}
	infra.SetGroupVersionKind(schema.GroupVersionKind{Group: ref.APIGroup, Version: "v1alpha1", Kind: ref.Kind})
	if err := mgmt.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}, infra); err != nil {
		return err
	}
	if err := writeYAML(filepath.Join(outputPath, "goofymachine.yaml"), infra.Object); err != nil {
		return err
	}
	if m.Status.NodeRef.Name == "" {
		return nil
	}
	wl, err := workloadClient(ctx, mgmt, m.Namespace, m.Spec.ClusterName)
	if err != nil {
		return err
	}
	node := &corev1.Node{}
	if err := wl.Get(ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, node); err != nil {
		return err
	}
	if err := writeYAML(filepath.Join(outputPath, "node.yaml"), node); err != nil {
		return err
	}
	pods := &corev1.PodList{}
	if err := wl.List(ctx, pods, client.MatchingFields{"spec.nodeName": node.Name}); err != nil {
		return err
	}
	return writeYAML(filepath.Join(outputPath, "pods.yaml"), pods)
}

// CollectMachinePoolLog: Goofy has no machine pools (no GoofyMachinePool kind), so there is none
// to collect from.
func (goofyLogCollector) CollectMachinePoolLog(context.Context, client.Client, *clusterv1.MachinePool, string) error {
	return nil
}

// CollectInfrastructureLogs writes the cluster's GoofyCluster (endpoint, conditions).
func (goofyLogCollector) CollectInfrastructureLogs(ctx context.Context, mgmt client.Client, c *clusterv1.Cluster, outputPath string) error {
	ref := c.Spec.InfrastructureRef
	if ref.Name == "" {
		return nil
	}
	infra := &unstructured.Unstructured{}
	infra.SetGroupVersionKind(schema.GroupVersionKind{Group: ref.APIGroup, Version: "v1alpha1", Kind: ref.Kind})
	if err := mgmt.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: ref.Name}, infra); err != nil {
		return err
	}
	if err := os.MkdirAll(outputPath, 0o755); err != nil {
		return err
	}
	return writeYAML(filepath.Join(outputPath, "goofycluster.yaml"), infra.Object)
}

// workloadClient reads the cluster's kubeconfig secret, as CAPI's controllers do.
func workloadClient(ctx context.Context, mgmt client.Client, namespace, cluster string) (client.Client, error) {
	s := &corev1.Secret{}
	if err := mgmt.Get(ctx, client.ObjectKey{Namespace: namespace, Name: secret.Name(cluster, secret.Kubeconfig)}, s); err != nil {
		return nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data[secret.KubeconfigDataName])
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{})
}

func writeYAML(file string, obj any) error {
	data, err := yaml.Marshal(obj)
	if err != nil {
		return err
	}
	return os.WriteFile(file, data, 0o644)
}
