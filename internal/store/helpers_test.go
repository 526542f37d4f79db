package store

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var (
	podsGVR        = corev1.SchemeGroupVersion.WithResource("pods")
	configMapsGVR  = corev1.SchemeGroupVersion.WithResource("configmaps")
	secretsGVR     = corev1.SchemeGroupVersion.WithResource("secrets")
	nodesGVR       = corev1.SchemeGroupVersion.WithResource("nodes")
	deploymentsGVR = appsv1.SchemeGroupVersion.WithResource("deployments")
	leasesGVR      = coordinationv1.SchemeGroupVersion.WithResource("leases")
)

// newCluster returns a fresh cluster store (with the default namespaces).
func newTestCluster(t testing.TB, opts ...ClusterOptions) *Cluster {
	t.Helper()
	o := ClusterOptions{KubernetesVersion: "v1.36.3"}
	if len(opts) > 0 {
		o = opts[0]
	}
	c, err := NewManager().AddCluster("test", o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	return c
}

func pod(ns, name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img:1"}}},
	}
}

func configMap(ns, name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
}

func mustCreate(t testing.TB, c *Cluster, obj client.Object) client.Object {
	t.Helper()
	info, err := resourceOf(obj)
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Create(info.GVR, obj.GetNamespace(), obj, CreateOptions{FieldManager: "test"})
	if err != nil {
		t.Fatalf("create %s: %v", obj.GetName(), err)
	}
	return out.(client.Object)
}

func mustGet(t testing.TB, c *Cluster, obj client.Object) client.Object {
	t.Helper()
	info, _ := resourceOf(obj)
	out, err := c.Get(info.GVR, obj.GetNamespace(), obj.GetName())
	if err != nil {
		t.Fatalf("get %s: %v", obj.GetName(), err)
	}
	return out.(client.Object)
}

// exists reports whether an object is still stored.
func exists(c *Cluster, obj client.Object) bool {
	info, _ := resourceOf(obj)
	_, err := c.Get(info.GVR, obj.GetNamespace(), obj.GetName())
	return err == nil
}

// safetyTimeout only keeps a broken test from hanging; no assertion depends on timing.
const safetyTimeout = 20 * time.Second

// nextEvent returns the next event of a watch, failing the test if the watch ends first.
func nextEvent(t testing.TB, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch ended unexpectedly")
		}
		return ev
	case <-time.After(safetyTimeout):
		t.Fatal("no watch event")
	}
	return watch.Event{}
}

// eventSummary is a comparable view of a watch event.
type eventSummary struct {
	Type watch.EventType
	Name string
}

func summarize(ev watch.Event) eventSummary {
	obj := ev.Object.(client.Object)
	return eventSummary{ev.Type, obj.GetName()}
}

func expectEvents(t testing.TB, w watch.Interface, want ...eventSummary) {
	t.Helper()
	g := NewWithT(t)
	for _, w1 := range want {
		g.Expect(summarize(nextEvent(t, w))).To(Equal(w1))
	}
}

var (
	customResourceDefinitionsGVR = schemaGVR{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	eventsV1GVR                  = schemaGVR{Group: "events.k8s.io", Version: "v1", Resource: "events"}
)

func containsString(s, sub string) bool { return strings.Contains(s, sub) }
