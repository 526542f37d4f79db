package simulate_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/simulate"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/workload"
)

// BenchmarkRunningPodsFleet is the memory per Running pod of `make bench-mux PODS=30` without
// the mux's listeners: GOOFY_BENCH_CLUSTERS (20) clusters of 6 Ready nodes with kubeadm's add-ons
// running, durable state and the simulator's shipped defaults (pod start delay 1 s), then a
// Deployment of 180 pods (30 per node) in each. Reported, per pod of the load: the time from the
// Deployments' creation until every pod is Running and Ready, the live heap, the heap's spans in
// use, RSS after a collection (and once the runtime gave back its free pages: scavenged), the
// state file, and RSS plus state file (issue 26's target: 8 KiB); then the same once
// the watch history has dropped the pods' earlier versions (the clusters keep 10 s of history
// here instead of the default 5 min, so the settled state comes quickly).
// GOOFY_BENCH_HEAPPROFILE names a file for the settled heap profile.
func BenchmarkRunningPodsFleet(b *testing.B) {
	clusters := 20
	if v, err := strconv.Atoi(os.Getenv("GOOFY_BENCH_CLUSTERS")); err == nil && v > 0 {
		clusters = v
	}
	if d, err := time.ParseDuration(os.Getenv("GOOFY_BENCH_HISTORY_TTL")); err == nil && d > 0 {
		fleetHistoryTTL = d
	}
	for range b.N {
		benchRunningPodsFleet(b, clusters)
	}
}

// fleetHistoryTTL stands in for the default 5 minutes of watch history (GOOFY_BENCH_HISTORY_TTL
// overrides it, a duration).
var fleetHistoryTTL = 10 * time.Second

func benchRunningPodsFleet(b *testing.B, clusters int) {
	const nodes, podsPerNode = 6, 30
	ctx := context.Background()
	b.StopTimer()
	db, err := storage.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	m := store.NewManager(store.WithStorage(db), store.WithSimulator(simulate.New(simulate.Options{Workloads: true})))
	defer m.Close()
	clients := make([]client.Client, clusters)
	for i := range clusters {
		name := fmt.Sprintf("fleet-%04d", i)
		c, err := m.AddCluster(name, store.ClusterOptions{KubernetesVersion: "v1.36.3", EventHistoryTTL: fleetHistoryTTL})
		if err != nil {
			b.Fatal(err)
		}
		cl := c.Client(store.WithoutManagedFields())
		clients[i] = cl
		for _, obj := range workload.ClusterObjects(workload.ClusterSpec{ClusterName: name, KubernetesVersion: "v1.36.3", ControlPlaneEndpoint: "127.0.0.1:6443", PodSubnet: "192.168.0.0/16"}) {
			if err := cl.Create(ctx, obj); err != nil {
				b.Fatal(err)
			}
		}
		for j := range nodes {
			addReadyNode(b, cl, fmt.Sprintf("n%d", j), fmt.Sprintf("10.%d.%d.%d", i/250, i%250, j+10))
		}
	}
	fleetWaitReady(b, clients, nodes+2) // kube-proxy per node, CoreDNS: the idle clusters
	time.Sleep(fleetHistoryTTL + 2*time.Second)
	before := fleetMemory(db)

	labels := map[string]string{"app": "load"}
	requests := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}
	b.StartTimer()
	start := time.Now()
	for _, cl := range clients {
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "load", Namespace: "default"}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](nodes * podsPerNode), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
						Resources: corev1.ResourceRequirements{Requests: requests}}}}}}}
		if err := cl.Create(ctx, dep); err != nil {
			b.Fatal(err)
		}
	}
	fleetWaitReady(b, clients, nodes+2+nodes*podsPerNode)
	allRunning := time.Since(start)
	b.StopTimer()

	pods := float64(clusters * nodes * podsPerNode)
	report := func(suffix string, after fleetMem) {
		b.ReportMetric(float64(after.heapLive-before.heapLive)/pods, "heap-live-B/pod"+suffix)
		b.ReportMetric(float64(after.heapInuse-before.heapInuse)/pods, "heap-inuse-B/pod"+suffix)
		b.ReportMetric(float64(after.rss-before.rss)/pods, "RSS-B/pod"+suffix)
		b.ReportMetric(float64(after.state-before.state)/pods, "state-B/pod"+suffix)
		b.ReportMetric(float64(after.rss-before.rss+after.state-before.state)/pods, "RSS+state-B/pod"+suffix)
		b.ReportMetric(float64(after.rssScavenged-before.rssScavenged)/pods, "RSS-scavenged-B/pod"+suffix)
		b.ReportMetric(float64(after.rssFile-before.rssFile)/pods, "RSS-file-B/pod"+suffix) // the state file's mapped pages
	}
	b.ReportMetric(allRunning.Seconds(), "s-all-running")
	report("", fleetMemory(db))
	time.Sleep(fleetHistoryTTL + 2*time.Second)
	report("-settled", fleetMemory(db))
	if path := os.Getenv("GOOFY_BENCH_HEAPPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.WriteHeapProfile(f); err != nil {
			b.Fatal(err)
		}
		_ = f.Close()
	}
	runtime.KeepAlive(m)
}

type fleetMem struct{ heapLive, heapInuse, rss, rssFile, rssScavenged, state int64 }

func fleetMemory(db *storage.DB) fleetMem {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	out := fleetMem{heapLive: int64(ms.HeapAlloc), heapInuse: int64(ms.HeapInuse), rss: fleetRSS(), rssFile: procStatus("RssFile:")}
	debug.FreeOSMemory()
	out.rssScavenged = fleetRSS()
	if fi, err := os.Stat(db.Path()); err == nil {
		out.state = fi.Size()
	}
	return out
}

func fleetRSS() int64 { return procStatus("VmRSS:") }

// procStatus reads a size in /proc/self/status, e.g. "VmRSS:" or "RssFile:", in bytes.
func procStatus(field string) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// fleetWaitReady waits, 8 clusters at a time, until every cluster has want Ready pods.
func fleetWaitReady(b *testing.B, clients []client.Client, want int) {
	b.Helper()
	deadline := time.Now().Add(10 * time.Minute)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed []string
		next   = make(chan int)
	)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				for {
					list := &corev1.PodList{}
					if err := clients[i].List(context.Background(), list); err != nil {
						mu.Lock()
						failed = append(failed, err.Error())
						mu.Unlock()
						break
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
						break
					}
					if time.Now().After(deadline) {
						mu.Lock()
						failed = append(failed, fmt.Sprintf("cluster %d: %d of %d pods ready", i, ready, want))
						mu.Unlock()
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		})
	}
	for i := range clients {
		next <- i
	}
	close(next)
	wg.Wait()
	if len(failed) > 0 {
		b.Fatalf("%d clusters failed, e.g. %s", len(failed), failed[0])
	}
}
