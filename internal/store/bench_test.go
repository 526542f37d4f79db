package store

import (
	"fmt"
	"runtime"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func BenchmarkGet(b *testing.B) {
	c := newTestCluster(b)
	mustCreate(b, c, pod("default", "p", map[string]string{"a": "b"}))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Get(podsGVR, "default", "p"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCreate(b *testing.B) {
	c := newTestCluster(b, ClusterOptions{EventHistory: 1024})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Create(podsGVR, "default", pod("default", fmt.Sprintf("p-%d", i), map[string]string{"a": "b"}), CreateOptions{FieldManager: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkList1000Pods(b *testing.B) {
	c := newTestCluster(b)
	for i := 0; i < 1000; i++ {
		mustCreate(b, c, pod("default", fmt.Sprintf("p-%04d", i), map[string]string{"a": "b"}))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		out, err := c.List(podsGVR, "default", ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if n := len(out.(*corev1.PodList).Items); n != 1000 {
			b.Fatalf("listed %d pods", n)
		}
	}
}

func BenchmarkStrategicMergePatch(b *testing.B) {
	c := newTestCluster(b, ClusterOptions{EventHistory: 1024})
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec: corev1.NodeSpec{ProviderID: "goofy://n1", Taints: []corev1.Taint{{Key: "a", Effect: corev1.TaintEffectNoSchedule}}}}
	mustCreate(b, c, node)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		patch := fmt.Sprintf(`{"metadata":{"labels":{"step":"%d"}},"spec":{"taints":[{"key":"b","effect":"NoSchedule"}]}}`, i)
		if _, err := c.Patch(nodesGVR, "", "n1", types.StrategicMergePatchType, []byte(patch), PatchOptions{FieldManager: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWatchFanout measures delivering 10,000 events to each of 100 watchers; one op is the
// whole fan-out.
func BenchmarkWatchFanout(b *testing.B) {
	const events, watchers = 10000, 100
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		c := newTestCluster(b, ClusterOptions{EventHistory: events + 10})
		mustCreate(b, c, configMap("default", "cm", nil))
		rv := currentRV(b, c)
		var wg sync.WaitGroup
		for w := 0; w < watchers; w++ {
			wt, err := c.Watch(configMapsGVR, "default", ListOptions{ResourceVersion: rv})
			if err != nil {
				b.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer wt.Stop()
				n := 0
				for range wt.ResultChan() {
					if n++; n == events {
						return
					}
				}
				b.Error("watch ended early")
			}()
		}
		b.StartTimer()
		cm := mustGet(b, c, configMap("default", "cm", nil)).(*corev1.ConfigMap)
		for e := 0; e < events; e++ {
			cm.ResourceVersion = ""
			cm.Data = map[string]string{"n": fmt.Sprint(e)}
			if _, err := c.Update(configMapsGVR, "default", cm, UpdateOptions{FieldManager: "bench"}); err != nil {
				b.Fatal(err)
			}
		}
		wg.Wait()
		b.StopTimer()
		c.close()
		b.StartTimer()
	}
	b.ReportMetric(float64(events*watchers*b.N)/b.Elapsed().Seconds(), "deliveries/s")
}

// heapAfterGC returns the live heap.
func heapAfterGC() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func benchmarkIdleClusters(b *testing.B, n int) {
	m := NewManager()
	if _, err := m.AddCluster("warm-up", ClusterOptions{}); err != nil { // shared scheme, schemas, field managers
		b.Fatal(err)
	}
	var perCluster, total float64
	for i := 0; i < b.N; i++ {
		before := heapAfterGC()
		names := make([]string, n)
		for j := range names {
			names[j] = fmt.Sprintf("c-%d-%d", i, j)
			if _, err := m.AddCluster(names[j], ClusterOptions{KubernetesVersion: "v1.36.3"}); err != nil {
				b.Fatal(err)
			}
		}
		after := heapAfterGC()
		total = float64(after - before)
		perCluster = total / float64(n)
		for _, name := range names {
			m.DeleteCluster(name)
		}
	}
	b.ReportMetric(perCluster, "B/cluster")
	b.ReportMetric(total/(1<<20), "MiB-total")
}

func BenchmarkIdleClusterMemory(b *testing.B)      { benchmarkIdleClusters(b, 1) }
func BenchmarkIdle1000ClustersMemory(b *testing.B) { benchmarkIdleClusters(b, 1000) }
