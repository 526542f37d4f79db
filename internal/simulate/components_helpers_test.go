package simulate_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/simulate"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// Helpers for the components that run in every cluster (garbage collector, namespaces, pod GC,
// the kubelets' pod termination and node leases, instant rollouts): a cluster with workloads
// off, used through the store's own verbs, as the store's tests used it before the components
// moved here.

var (
	podsGVR        = corev1.SchemeGroupVersion.WithResource("pods")
	nodesGVR       = corev1.SchemeGroupVersion.WithResource("nodes")
	namespacesGVR  = corev1.SchemeGroupVersion.WithResource("namespaces")
	configMapsGVR  = corev1.SchemeGroupVersion.WithResource("configmaps")
	leasesGVR      = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}
	deploymentsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
)

// safetyTimeout only keeps a broken test from hanging; no assertion depends on timing.
const safetyTimeout = 20 * time.Second

// poll is how often an Eventually looks again.
const poll = 10 * time.Millisecond

// component is a cluster with workloads off: only the components that run in every cluster.
type component struct {
	manager *store.Manager
	sim     *simulate.Simulator
	cluster *store.Cluster
}

// newComponentCluster starts a workloads-off cluster named "test" under opts; db, when set,
// keeps its state (for restarts, which call it again on the same db). configure runs on the
// simulator before the cluster starts.
func newComponentCluster(t *testing.T, opts simulate.Options, db *storage.DB, configure ...func(*simulate.Simulator)) *component {
	t.Helper()
	opts.Workloads = false
	sim := simulate.New(opts)
	for _, f := range configure {
		f(sim)
	}
	mopts := []store.ManagerOption{store.WithSimulator(sim)}
	if db != nil {
		mopts = append(mopts, store.WithStorage(db))
	}
	m := store.NewManager(mopts...)
	c, err := m.AddCluster("test", store.ClusterOptions{KubernetesVersion: testVersion})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return &component{manager: m, sim: sim, cluster: c}
}

// newTestCluster is a workloads-off cluster kept in memory.
func newTestCluster(t *testing.T, opts ...simulate.Options) *store.Cluster {
	t.Helper()
	var o simulate.Options
	if len(opts) > 0 {
		o = opts[0]
	}
	return newComponentCluster(t, o, nil).cluster
}

func gvrOf(t testing.TB, obj client.Object) schema.GroupVersionResource {
	t.Helper()
	gvk, err := apiutil.GVKForObject(obj, store.Scheme())
	if err != nil {
		t.Fatal(err)
	}
	m, err := store.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatal(err)
	}
	return m.Resource
}

func pod(ns, name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img:1"}}},
	}
}

// scheduledPod is a pod bound to a node, with the API server's default grace period (30 s).
func scheduledPod(ns, name string) *corev1.Pod {
	p := pod(ns, name, nil)
	p.Spec.NodeName = "node-0"
	return p
}

func configMap(ns, name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
}

func readyNode(name string, ready corev1.ConditionStatus) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
}

func mustCreate(t testing.TB, c *store.Cluster, obj client.Object) client.Object {
	t.Helper()
	out, err := c.Create(gvrOf(t, obj), obj.GetNamespace(), obj, store.CreateOptions{FieldManager: "test"})
	if err != nil {
		t.Fatalf("create %s: %v", obj.GetName(), err)
	}
	return out.(client.Object)
}

func mustGet(t testing.TB, c *store.Cluster, obj client.Object) client.Object {
	t.Helper()
	out, err := c.Get(gvrOf(t, obj), obj.GetNamespace(), obj.GetName())
	if err != nil {
		t.Fatalf("get %s: %v", obj.GetName(), err)
	}
	return out.(client.Object)
}

// exists reports whether an object is still stored.
func exists(t testing.TB, c *store.Cluster, obj client.Object) bool {
	t.Helper()
	_, err := c.Get(gvrOf(t, obj), obj.GetNamespace(), obj.GetName())
	return err == nil
}

func deletePod(t *testing.T, c *store.Cluster, name string, grace *int64) *corev1.Pod {
	t.Helper()
	out, err := c.Delete(podsGVR, "default", name, store.DeleteOptions{GracePeriodSeconds: grace})
	if err != nil {
		t.Fatalf("delete %s: %v", name, err)
	}
	return out.(*corev1.Pod)
}
