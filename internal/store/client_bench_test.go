package store

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kubeletNode is a Node as the reconcilers register it: labels, a taint, capacity and conditions.
func kubeletNode(name string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "node-role.kubernetes.io/control-plane": ""}},
		Spec: corev1.NodeSpec{ProviderID: "goofy://" + name,
			Taints: []corev1.Taint{{Key: "node.cluster.x-k8s.io/uninitialized", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Capacity:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi")},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
		},
	}
}

// benchmarkClientCreate creates objects through an in-process client, as the reconcilers do.
func benchmarkClientCreate(b *testing.B, cl func(*Cluster) client.Client, obj func(i int) client.Object) {
	c := newTestCluster(b, ClusterOptions{EventHistory: 1024})
	cli := cl(c)
	ctx := context.Background()
	mustCreate(b, c, obj(-1)) // warm the shared field managers and caches
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := cli.Create(ctx, obj(i)); err != nil {
			b.Fatal(err)
		}
	}
}

func benchNode(i int) client.Object { return kubeletNode(fmt.Sprintf("n-%d", i)) }
func benchPod(i int) client.Object {
	p := pod("kube-system", fmt.Sprintf("etcd-%d", i), map[string]string{"component": "etcd", "tier": "control-plane"})
	p.Spec.NodeName = fmt.Sprintf("n-%d", i)
	return p
}

func trackedClient(c *Cluster) client.Client { return c.Client() }

func BenchmarkClientCreateNode(b *testing.B) { benchmarkClientCreate(b, trackedClient, benchNode) }
func BenchmarkClientCreatePod(b *testing.B)  { benchmarkClientCreate(b, trackedClient, benchPod) }

func untrackedClient(c *Cluster) client.Client { return c.Client(WithoutManagedFields()) }

func BenchmarkClientCreateNodeUntracked(b *testing.B) {
	benchmarkClientCreate(b, untrackedClient, benchNode)
}
func BenchmarkClientCreatePodUntracked(b *testing.B) {
	benchmarkClientCreate(b, untrackedClient, benchPod)
}
