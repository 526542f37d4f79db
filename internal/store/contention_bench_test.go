package store

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// largeCRD is a server-side apply body of a CustomResourceDefinition of about size bytes (big
// operators ship CRDs of several MiB), its schema descriptions carrying tag.
func largeCRD(size int, tag string) []byte {
	props := map[string]any{}
	for i := 0; len(props)*1100 < size; i++ {
		props[fmt.Sprintf("field%05d", i)] = map[string]any{"type": "string", "description": tag + strings.Repeat("d", 1024)}
	}
	crd := map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "widgets.example.com"},
		"spec": map[string]any{
			"group": "example.com", "scope": "Namespaced",
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "properties": map[string]any{
					"spec": map[string]any{"type": "object", "properties": props}}}}}},
		},
	}
	out, err := yaml.Marshal(crd)
	if err != nil {
		panic(err)
	}
	return out
}

// BenchmarkGetDuringLargeApply measures GET latency of a small object on a cluster while another
// client keeps server-side applying a 2.5 MiB CRD to it: the work of an apply must not sit under
// the lock every reader of the cluster waits on. GETs are paced (one per 500 µs, as a steady
// client sends them), so the percentiles say how much of the time a reader is held up.
func BenchmarkGetDuringLargeApply(b *testing.B) {
	c := newTestCluster(b, ClusterOptions{EventHistory: 64})
	mustCreate(b, c, pod("default", "p", nil))
	bodies := [][]byte{largeCRD(2500<<10, "a"), largeCRD(2500<<10, "b")}
	apply := func(i int) {
		if _, err := c.Patch(customResourceDefinitionsGVR, "", "widgets.example.com", types.ApplyYAMLPatchType, bodies[i%2],
			PatchOptions{FieldManager: "bench", Force: true}); err != nil {
			b.Error(err)
		}
	}
	apply(0)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	applies := 0
	go func() {
		defer wg.Done()
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			apply(i)
			applies++
		}
	}()
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		time.Sleep(500 * time.Microsecond)
		start := time.Now()
		if _, err := c.Get(podsGVR, "default", "p"); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-µs")
	b.ReportMetric(float64(applies), "applies")
}
