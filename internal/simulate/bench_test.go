package simulate_test

import (
	"context"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/simulate"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/workload"
)

// BenchmarkRunningPods: clusters of 6 nodes, each with a Deployment of 30 pods per node, from
// the Deployment's creation until every pod is Running and ready; it reports the time per
// cluster and the heap held per Running pod (store objects, caches, indexes), memory only.
func BenchmarkRunningPods(b *testing.B) {
	const nodes, podsPerNode = 6, 30
	ctx := context.Background()
	for range b.N {
		b.StopTimer()
		m, cl := newBenchCluster(b)
		for i := range nodes {
			addReadyNode(b, cl, fmt.Sprintf("n%d", i), fmt.Sprintf("10.0.0.%d", i+1))
		}
		waitRunning(b, cl, nodes+2) // kube-proxy per node, CoreDNS: the idle cluster
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		b.StartTimer()
		labels := map[string]string{"app": "load"}
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "load", Namespace: "default"}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](nodes * podsPerNode), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}}}
		if err := cl.Create(ctx, dep); err != nil {
			b.Fatal(err)
		}
		waitRunning(b, cl, nodes+2+nodes*podsPerNode)
		b.StopTimer()
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(nodes*podsPerNode), "heap-B/pod")
		_ = m.DeleteCluster("bench")
	}
}

// newBenchCluster is a cluster "bench" with workloads on and kubeadm's objects, no Nodes yet.
func newBenchCluster(b *testing.B) (*store.Manager, client.Client) {
	b.Helper()
	m := store.NewManager(store.WithSimulator(simulate.New(simulate.Options{Workloads: true, PodStartDelay: time.Millisecond})))
	c, err := m.AddCluster("bench", store.ClusterOptions{KubernetesVersion: "v1.36.3"})
	if err != nil {
		b.Fatal(err)
	}
	cl := c.Client(store.WithoutManagedFields(), store.WithoutSyncWait())
	for _, obj := range workload.ClusterObjects(workload.ClusterSpec{ClusterName: "bench", KubernetesVersion: "v1.36.3", ControlPlaneEndpoint: "127.0.0.1:6443", PodSubnet: "192.168.0.0/16"}) {
		if err := cl.Create(context.Background(), obj); err != nil {
			b.Fatal(err)
		}
	}
	return m, cl
}

// addReadyNode creates a Ready Node without taints, as kubelet registers one and then reports
// its status.
func addReadyNode(b *testing.B, cl client.Client, name, ip string) {
	b.Helper()
	ctx := context.Background()
	n := workload.Node(workload.NodeSpec{Name: name, KubeletVersion: "v1.36.3", InternalIP: ip, Ready: true}, metav1.Now())
	n.Spec.Taints = nil
	status := n.Status
	if err := cl.Create(ctx, n); err != nil {
		b.Fatal(err)
	}
	for {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(n), n); err != nil {
			b.Fatal(err)
		}
		n.Status = status
		if err := cl.Status().Update(ctx, n); err == nil {
			return
		}
	}
}

func waitRunning(b *testing.B, cl client.Client, want int) {
	b.Helper()
	waitRunningEvery(b, cl, want, 5*time.Millisecond)
}

// waitRunningEvery waits for want ready pods, listing them every interval.
func waitRunningEvery(b *testing.B, cl client.Client, want int, interval time.Duration) {
	b.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		list := &corev1.PodList{}
		if err := cl.List(context.Background(), list); err != nil {
			b.Fatal(err)
		}
		ready := 0
		for _, p := range list.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		if ready >= want {
			return
		}
		time.Sleep(interval)
	}
	list := &corev1.PodList{}
	_ = cl.List(context.Background(), list)
	for _, p := range list.Items {
		b.Logf("%s/%s node=%q phase=%s conds=%v", p.Namespace, p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Conditions)
	}
	b.Fatalf("fewer than %d pods ready after 2 minutes", want)
}

// BenchmarkDaemonSetOnManyNodes: one cluster with kubeadm's objects gets 500 Ready Nodes, 20 at
// a time as a MachineDeployment's workers join, each batch once kube-proxy's DaemonSet has a
// ready pod on every Node before it (kubernetes-sigs/cluster-api #13305's 500 workers). The
// DaemonSet controller syncs on each change of its pods and walks every Node each time, so what
// it does per Node decides the cost: reported as CPU seconds of the process per op (cpu-s/op).
func BenchmarkDaemonSetOnManyNodes(b *testing.B) {
	const nodes, batch = 500, 20
	var cpu time.Duration
	for range b.N {
		b.StopTimer()
		m, cl := newBenchCluster(b)
		start := processCPU(b)
		b.StartTimer()
		for i := range nodes {
			addReadyNode(b, cl, fmt.Sprintf("n%03d", i), fmt.Sprintf("10.0.%d.%d", i/250, i%250+1))
			if (i+1)%batch == 0 {
				waitRunningEvery(b, cl, i+1+2, 10*time.Millisecond) // kube-proxy on each Node so far, CoreDNS
			}
		}
		b.StopTimer()
		cpu += processCPU(b) - start
		_ = m.DeleteCluster("bench")
	}
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWorkloadsOffClusters: clusters with workloads off as Goofy's machine controller fills
// them (kubeadm's objects, 3 control-plane Nodes with their static pods), until CoreDNS and
// kube-proxy report their rollouts; it reports the time per cluster and the heap each idle
// cluster holds (store objects and the simulated components' state), memory only.
func BenchmarkWorkloadsOffClusters(b *testing.B) {
	const clusters, nodes = 50, 3
	ctx := context.Background()
	for range b.N {
		b.StopTimer()
		m := store.NewManager(store.WithSimulator(simulate.New(simulate.Options{})))
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		b.StartTimer()
		for i := range clusters {
			name := fmt.Sprintf("off-%d", i)
			c, err := m.AddCluster(name, store.ClusterOptions{KubernetesVersion: "v1.36.3"})
			if err != nil {
				b.Fatal(err)
			}
			cl := c.Client(store.WithoutManagedFields(), store.WithoutSyncWait())
			for _, obj := range workload.ClusterObjects(workload.ClusterSpec{ClusterName: name, KubernetesVersion: "v1.36.3", ControlPlaneEndpoint: "127.0.0.1:6443", PodSubnet: "192.168.0.0/16"}) {
				if err := cl.Create(ctx, obj); err != nil {
					b.Fatal(err)
				}
			}
			for n := range nodes {
				node := fmt.Sprintf("cp-%d", n)
				ip := fmt.Sprintf("10.0.0.%d", n+1)
				if err := cl.Create(ctx, workload.Node(workload.NodeSpec{Name: node, KubeletVersion: "v1.36.3", InternalIP: ip, ControlPlane: true, Ready: true}, metav1.Now())); err != nil {
					b.Fatal(err)
				}
				for _, component := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
					if err := cl.Create(ctx, workload.StaticPod(component, node, "v1.36.3", ip, metav1.Now())); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
		for _, name := range m.ClusterNames() {
			c, _ := m.GetCluster(name)
			waitRolledOut(b, c.Client(), nodes)
		}
		b.StopTimer()
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/clusters, "heap-B/cluster")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(clusters*(b.N)), "ns/cluster")
		for _, name := range m.ClusterNames() {
			_ = m.DeleteCluster(name)
		}
	}
}

// waitRolledOut waits until CoreDNS and kube-proxy report their rollouts.
func waitRolledOut(b *testing.B, cl client.Client, nodes int32) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		dns, proxy := &appsv1.Deployment{}, &appsv1.DaemonSet{}
		if err := cl.Get(context.Background(), client.ObjectKey{Namespace: "kube-system", Name: "coredns"}, dns); err != nil {
			b.Fatal(err)
		}
		if err := cl.Get(context.Background(), client.ObjectKey{Namespace: "kube-system", Name: "kube-proxy"}, proxy); err != nil {
			b.Fatal(err)
		}
		if dns.Status.ObservedGeneration == dns.Generation && dns.Status.AvailableReplicas > 0 && proxy.Status.NumberAvailable == nodes {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.Fatal("CoreDNS and kube-proxy did not report their rollouts within a minute")
}
