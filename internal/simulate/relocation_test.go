package simulate_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"
	"weak"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/simulate"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// TestSettledPodsReleaseTheirMemory: once the watch history drops a Running pod's events, the
// store moves its stored version to fresh memory (storage's relocate.go) and the simulators'
// cache follows, so the memory the pod was first written in is freed; the controllers go on
// working from the moved versions.
func TestSettledPodsReleaseTheirMemory(t *testing.T) {
	g := NewWithT(t)
	db, err := storage.Open(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = db.Close() })
	sim := simulate.New(simulate.Options{Workloads: true, PodStartDelay: 100 * time.Millisecond, PodStopDelay: 100 * time.Millisecond})
	m := store.NewManager(store.WithSimulator(sim), store.WithStorage(db))
	t.Cleanup(m.Close)
	c, err := m.AddCluster("test", store.ClusterOptions{KubernetesVersion: testVersion, EventHistoryTTL: time.Second})
	g.Expect(err).NotTo(HaveOccurred())
	e := &env{t: t, manager: m, sim: sim, cluster: c, client: c.Client()}
	e.addKubeadmObjects()
	e.addNode("worker-0", "10.0.0.20", false)

	// The stored versions of the Running pods, as an informer hands them (the store's own),
	// held weakly so that the test does not keep them.
	var mu sync.Mutex
	running := map[string]weak.Pointer[corev1.Pod]{}
	relocated := map[string]bool{}
	stop := c.Inform([]schema.GroupResource{{Resource: "pods"}}, func(ch store.Change) {
		mu.Lock()
		defer mu.Unlock()
		if ch.Relocated {
			relocated[ch.Key] = true
			return
		}
		if pod, ok := ch.New.(*corev1.Pod); ok && pod.Status.Phase == corev1.PodRunning && pod.Namespace == "default" {
			running[ch.Key] = weak.Make(pod)
		}
	})
	defer stop()

	ctx := context.Background()
	labels := map[string]string{"app": "settle"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settle"}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}}}}}
	g.Expect(e.client.Create(ctx, dep)).To(Succeed())
	runningPods := func(g Gomega, want int) []corev1.Pod {
		var pods corev1.PodList
		g.Expect(e.client.List(ctx, &pods, client.InNamespace("default"), client.MatchingLabels(labels))).To(Succeed())
		var out []corev1.Pod
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				out = append(out, p)
			}
		}
		g.Expect(out).To(HaveLen(want))
		return out
	}
	var before []corev1.Pod
	g.Eventually(func(g Gomega) { before = runningPods(g, 2) }).WithTimeout(safetyTimeout).WithPolling(poll).Should(Succeed())

	// Both pods' versions move once their events are a second old, and their first memory goes.
	g.Eventually(func(g Gomega) {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range before {
			g.Expect(relocated).To(HaveKey(p.Namespace + "/" + p.Name))
		}
	}).WithTimeout(safetyTimeout).WithPolling(poll).Should(Succeed())
	g.Eventually(func(g Gomega) {
		runtime.GC()
		mu.Lock()
		defer mu.Unlock()
		for _, p := range before {
			g.Expect(running[p.Namespace+"/"+p.Name].Value()).To(BeNil(), "the store or a cache still holds %s's first memory", p.Name)
		}
	}).WithTimeout(safetyTimeout).WithPolling(100 * time.Millisecond).Should(Succeed())

	// The same versions read back; the controllers work from the moved ones.
	after := runningPods(g, 2)
	g.Expect(after).To(ConsistOf(before))
	g.Expect(e.client.Get(ctx, client.ObjectKeyFromObject(dep), dep)).To(Succeed())
	dep.Spec.Replicas = ptr.To[int32](3)
	g.Expect(e.client.Update(ctx, dep)).To(Succeed())
	g.Expect(e.client.Delete(ctx, &before[0])).To(Succeed())
	g.Eventually(func(g Gomega) {
		pods := runningPods(g, 3)
		for _, p := range pods {
			g.Expect(p.Name).NotTo(Equal(before[0].Name))
		}
	}).WithTimeout(safetyTimeout).WithPolling(poll).Should(Succeed())
}
