package mux

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/workload"
)

// benchPods is BenchmarkMuxScale's workload option (GOOFY_BENCH_PODS pods per node, make
// bench-mux PODS=30): once the fleet is set up, every cluster gets a Deployment of that many pods
// per node (tolerating every taint, so control-plane nodes run them too, small requests so that
// 30 fit a default node), and the simulated scheduler, kubelets and controllers run them with the
// shipped defaults (pod start delay 1 s). Reported: the time from the first Deployment's creation
// until every pod of every cluster (kubeadm's CoreDNS and kube-proxy included) is Running and
// ready, and what the Running pods cost: RSS, heap and state-file bytes per pod.
func benchPods(b *testing.B, m *WorkloadClustersMux, db *storage.DB, names []string, nodesPerCluster, podsPerNode int) {
	ctx := context.Background()
	// The baseline with every free page returned: the manager's trimmer may return them later,
	// and that must not count as memory the pods gave back.
	debug.FreeOSMemory()
	rssBefore := benchRSS()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	stateBefore := benchStateBytes(db)
	replicas := nodesPerCluster * podsPerNode
	// kubeadm's add-ons run too: CoreDNS's two replicas and one kube-proxy per node.
	perCluster := replicas + 2 + nodesPerCluster
	labels := map[string]string{"app": "bench-load"}
	requests := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}

	start := time.Now()
	clients := make([]client.Client, len(names))
	for i, name := range names {
		l, ok := m.Listener(name)
		if !ok {
			b.Fatalf("no listener for %s", name)
		}
		clients[i], _ = l.GetClient()
		dep := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "bench-load", Namespace: metav1.NamespaceDefault},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To(int32(replicas)),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
						Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
							Resources: corev1.ResourceRequirements{Requests: requests}}},
					},
				},
			},
		}
		if err := clients[i].Create(ctx, dep); err != nil {
			b.Fatalf("creating the Deployment of %s: %v", name, err)
		}
	}
	created := time.Since(start)

	// Wait for every cluster, 16 at a time, re-listing a cluster's pods until all are ready.
	deadline := start.Add(10 * time.Minute)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []string
		next     = make(chan int)
	)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				if err := benchWaitPodsReady(ctx, clients[i], perCluster, deadline); err != nil {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%s: %v", names[i], err))
					mu.Unlock()
				}
			}
		})
	}
	for i := range names {
		next <- i
	}
	close(next)
	wg.Wait()
	allRunning := time.Since(start)
	if len(failures) > 0 {
		b.Fatalf("%d clusters did not run their pods, e.g. %s", len(failures), failures[0])
	}

	runtime.GC()
	rss := benchRSS() - rssBefore
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	state := benchStateBytes(db) - stateBefore
	// kubeadm's add-ons started with the fleet: the memory figures are per pod of the load.
	pods := float64(len(names) * replicas)
	b.ReportMetric(float64(len(names)*perCluster), "pods-running")
	b.ReportMetric(created.Seconds(), "s-deployments-created")
	b.ReportMetric(allRunning.Seconds(), "s-all-pods-running")
	b.ReportMetric(float64(rss)/pods, "RSS-B/pod")
	b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/pods, "heap-inuse-B/pod")
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/pods, "heap-live-B/pod")
	if db != nil {
		b.ReportMetric(float64(state)/pods, "state-B/pod")
	}
	// Right after the start the watch history still holds every pod's earlier versions (created,
	// bound) for its 75 s (docs/state.md); GOOFY_BENCH_SETTLE_SECONDS=265 measures again once
	// they are gone: what Running pods cost for the rest of their lives.
	if settle := benchEnvInt("GOOFY_BENCH_SETTLE_SECONDS", 0); settle > 0 {
		time.Sleep(time.Duration(settle) * time.Second)
		runtime.GC()
		var settled runtime.MemStats
		runtime.ReadMemStats(&settled)
		b.ReportMetric(float64(benchRSS()-rssBefore)/pods, "RSS-B/pod-settled")
		b.ReportMetric(float64(int64(settled.HeapInuse)-int64(before.HeapInuse))/pods, "heap-inuse-B/pod-settled")
		b.ReportMetric(float64(int64(settled.HeapAlloc)-int64(before.HeapAlloc))/pods, "heap-live-B/pod-settled")
		if path := os.Getenv("GOOFY_BENCH_SETTLED_HEAP_PROFILE"); path != "" {
			// The settled pods' heap: what holds the heap in use beyond the live bytes.
			benchWriteHeapProfile(b, path)
		}
		// What the process holds once the runtime gave back the pages it no longer uses.
		debug.FreeOSMemory()
		b.ReportMetric(float64(benchRSS()-rssBefore)/pods, "RSS-B/pod-settled-scavenged")
	}
}

// benchWaitPodsReady polls c until want pods are Ready or the deadline passes.
func benchWaitPodsReady(ctx context.Context, c client.Client, want int, deadline time.Time) error {
	for {
		list := &corev1.PodList{}
		if err := c.List(ctx, list); err != nil {
			return err
		}
		ready := 0
		for i := range list.Items {
			for _, cond := range list.Items[i].Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		if ready >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d pods ready", ready, want)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// benchStateBytes is the size of the state file (0 for the memory-only store).
func benchStateBytes(db *storage.DB) int64 {
	if db == nil {
		return 0
	}
	fi, err := os.Stat(db.Path())
	if err != nil {
		return 0
	}
	return fi.Size()
}

// benchNodeForPods is a Node as the fleet's, without the uninitialized taint, which CAPI removes
// once the Machine has its providerID, so that pods can be scheduled on it.
func benchNodeForPods(n *corev1.Node) *corev1.Node {
	var taints []corev1.Taint
	for _, t := range n.Spec.Taints {
		if t.Key != workload.UninitializedTaint.Key {
			taints = append(taints, t)
		}
	}
	n.Spec.Taints = taints
	return n
}
