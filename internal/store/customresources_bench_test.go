package store

import (
	"fmt"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// benchmarkCRUD creates, reads, updates and deletes one object per iteration, as an in-process
// client does (field managers tracked).
func benchmarkCRUD(b *testing.B, c *Cluster, gvr schema.GroupVersionResource, newObj func(name string) client.Object, change func(client.Object)) {
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		name := fmt.Sprintf("o-%d", i)
		if _, err := c.Create(gvr, "default", newObj(name), CreateOptions{FieldManager: "bench"}); err != nil {
			b.Fatal(err)
		}
		obj, err := c.Get(gvr, "default", name)
		if err != nil {
			b.Fatal(err)
		}
		change(obj.(client.Object))
		if _, err := c.Update(gvr, "default", obj, UpdateOptions{FieldManager: "bench"}); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Delete(gvr, "default", name, DeleteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCRUDConfigMap(b *testing.B) {
	c := newTestCluster(b, ClusterOptions{EventHistory: 1024})
	benchmarkCRUD(b, c, configMapsGVR,
		func(name string) client.Object { return configMap("default", name, map[string]string{"color": "red"}) },
		func(o client.Object) { o.(*corev1.ConfigMap).Data["color"] = "blue" })
}

func BenchmarkCRUDCustomResource(b *testing.B) {
	c := newTestCluster(b, ClusterOptions{EventHistory: 1024})
	if _, err := c.Create(crdsGVR, "", widgetCRD(), CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	benchmarkCRUD(b, c, widgetsGVR,
		func(name string) client.Object { return widget(name, map[string]any{"color": "red", "size": int64(2)}) },
		func(o client.Object) {
			_ = unstructured.SetNestedField(o.(*unstructured.Unstructured).Object, "blue", "spec", "color")
		})
}

// twentyCRDs are 20 distinct CRDs like an add-on stack installs (the widget schema under 20
// groups).
func twentyCRDs() []*apiextensionsv1.CustomResourceDefinition {
	out := make([]*apiextensionsv1.CustomResourceDefinition, 20)
	for i := range out {
		crd := widgetCRD()
		crd.Spec.Group = fmt.Sprintf("addon%d.example.com", i)
		crd.Name = "widgets." + crd.Spec.Group
		out[i] = crd
	}
	return out
}

// BenchmarkIdle1000ClustersWith20CRDs is the memory of 1,000 clusters that each hold the same 20
// CRDs (the builds are shared, the CRD objects are each cluster's own).
func BenchmarkIdle1000ClustersWith20CRDs(b *testing.B) {
	const n = 1000
	m := NewManager()
	if _, err := m.AddCluster("warm-up", ClusterOptions{}); err != nil {
		b.Fatal(err)
	}
	crds := twentyCRDs()
	var perCluster, total float64
	for i := 0; i < b.N; i++ {
		before := heapAfterGC()
		names := make([]string, n)
		for j := range names {
			names[j] = fmt.Sprintf("c-%d-%d", i, j)
			c, err := m.AddCluster(names[j], ClusterOptions{KubernetesVersion: "v1.36.3"})
			if err != nil {
				b.Fatal(err)
			}
			for _, crd := range crds {
				if _, err := c.Create(crdsGVR, "", crd.DeepCopy(), CreateOptions{FieldManager: "bench", SkipSyncWait: true}); err != nil {
					b.Fatal(err)
				}
			}
		}
		after := heapAfterGC()
		total = float64(after - before)
		perCluster = total / n
		for _, name := range names {
			_ = m.DeleteCluster(name)
		}
	}
	b.ReportMetric(perCluster, "B/cluster")
	b.ReportMetric(total/(1<<20), "MiB-total")
}
