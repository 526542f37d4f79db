package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/paused"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
)

// pausedHold is how long a paused object is watched for a reconcile that should not happen.
const pausedHold = 2 * time.Second

// TestPausedContract is CAPI's v1beta2 pause contract through a running manager, as a user meets
// it: the cluster.x-k8s.io/paused annotation on a GoofyMachine or GoofyCluster, or the Cluster's
// spec.paused, turns the object's Paused condition True within a bounded wait and stops its
// reconciliation; removing it turns Paused False and reconciliation resumes. (The event filter
// used to drop the very annotation update that should set Paused=True.)
func TestPausedContract(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	ns := newNamespace(t)
	h := newHarness(t)
	startManager(t, h, ns, managerOptions{})

	nodeReady := func(t *testing.T, f *fixture, name string) corev1.ConditionStatus {
		node := &corev1.Node{}
		node.Name = name
		if err := storeGet(h, f, node); err != nil {
			t.Fatal(err)
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status
			}
		}
		return ""
	}
	annotate := func(t *testing.T, obj client.Object, key string, set bool) {
		t.Helper()
		get(t, obj)
		a := obj.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		if set {
			a[key] = "true"
		} else {
			delete(a, key)
		}
		obj.SetAnnotations(a)
		if err := k8sClient.Update(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("GoofyMachine annotation", func(t *testing.T) {
		g := NewWithT(t)
		f, gm := readyWorker(t, ns)
		name := gm.Name
		awaitCondition(t, gm, clusterv1.PausedCondition, metav1.ConditionFalse, clusterv1.NotPausedReason)

		annotate(t, gm, clusterv1.PausedAnnotation, true)
		awaitCondition(t, gm, clusterv1.PausedCondition, metav1.ConditionTrue, clusterv1.PausedReason)
		g.Expect(conditions.Get(gm, clusterv1.PausedCondition).Message).To(Equal("GoofyMachine has the cluster.x-k8s.io/paused annotation"))

		// Paused: a change the reconciler would act on waits.
		annotate(t, gm, NodeNotReadyAnnotation, true)
		g.Consistently(func() corev1.ConditionStatus { return nodeReady(t, f, name) }, pausedHold, 100*time.Millisecond).
			Should(Equal(corev1.ConditionTrue))

		annotate(t, gm, clusterv1.PausedAnnotation, false)
		awaitCondition(t, gm, clusterv1.PausedCondition, metav1.ConditionFalse, clusterv1.NotPausedReason)
		g.Eventually(func() corev1.ConditionStatus { return nodeReady(t, f, name) }, wakeTimeout, 50*time.Millisecond).
			Should(Equal(corev1.ConditionFalse))
	})

	t.Run("GoofyCluster annotation", func(t *testing.T) {
		g := NewWithT(t)
		f := provisionedCluster(t, ns, true)
		awaitCondition(t, f.gc, clusterv1.PausedCondition, metav1.ConditionFalse, clusterv1.NotPausedReason)

		annotate(t, f.gc, clusterv1.PausedAnnotation, true)
		awaitCondition(t, f.gc, clusterv1.PausedCondition, metav1.ConditionTrue, clusterv1.PausedReason)
		g.Expect(conditions.Get(f.gc, clusterv1.PausedCondition).Message).To(Equal("GoofyCluster has the cluster.x-k8s.io/paused annotation"))

		// Paused: a new failure domain is not reported.
		get(t, f.gc)
		f.gc.Spec.FailureDomains = append(f.gc.Spec.FailureDomains, infrav1.GoofyFailureDomain{Name: "fd-3"})
		g.Expect(k8sClient.Update(ctx, f.gc)).To(Succeed())
		g.Consistently(func() int { get(t, f.gc); return len(f.gc.Status.FailureDomains) }, pausedHold, 100*time.Millisecond).
			Should(Equal(2))

		annotate(t, f.gc, clusterv1.PausedAnnotation, false)
		awaitCondition(t, f.gc, clusterv1.PausedCondition, metav1.ConditionFalse, clusterv1.NotPausedReason)
		g.Eventually(func() int { get(t, f.gc); return len(f.gc.Status.FailureDomains) }, wakeTimeout, 50*time.Millisecond).
			Should(Equal(3))
	})

	t.Run("Cluster spec.paused", func(t *testing.T) {
		g := NewWithT(t)
		f, gm := readyWorker(t, ns)
		name := gm.Name

		setPaused := func(p bool) {
			get(t, f.cluster)
			f.cluster.Spec.Paused = ptr.To(p)
			g.Expect(k8sClient.Update(ctx, f.cluster)).To(Succeed())
		}
		setPaused(true)
		awaitCondition(t, gm, clusterv1.PausedCondition, metav1.ConditionTrue, clusterv1.PausedReason)
		awaitCondition(t, f.gc, clusterv1.PausedCondition, metav1.ConditionTrue, clusterv1.PausedReason)
		g.Expect(conditions.Get(gm, clusterv1.PausedCondition).Message).To(Equal("Cluster spec.paused is set to true"))

		annotate(t, gm, NodeNotReadyAnnotation, true)
		g.Consistently(func() corev1.ConditionStatus { return nodeReady(t, f, name) }, pausedHold, 100*time.Millisecond).
			Should(Equal(corev1.ConditionTrue))

		setPaused(false)
		awaitCondition(t, gm, clusterv1.PausedCondition, metav1.ConditionFalse, clusterv1.NotPausedReason)
		awaitCondition(t, f.gc, clusterv1.PausedCondition, metav1.ConditionFalse, clusterv1.NotPausedReason)
		g.Eventually(func() corev1.ConditionStatus { return nodeReady(t, f, name) }, wakeTimeout, 50*time.Millisecond).
			Should(Equal(corev1.ConditionFalse))
	})
}

// readyWorker is a worker machine the running manager has provisioned, in a new cluster.
func readyWorker(t *testing.T, ns string) (*fixture, *infrav1.GoofyMachine) {
	t.Helper()
	f := provisionedCluster(t, ns, true)
	_, gm := newMachine(t, f, f.cluster.Name+"-md-0", machineOpts{})
	awaitCondition(t, gm, infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason)
	return f, gm
}

// TestPausedConditionIsCAPIs: the Paused condition the reconcilers set in memory (their one
// deferred patch carries it) is the one CAPI's paused.EnsurePausedCondition would write with a
// patch of its own: same status, reason, message and observed generation, for every combination of
// the Cluster's spec.paused and the object's annotation.
func TestPausedConditionIsCAPIs(t *testing.T) {
	g := NewWithT(t)
	for _, clusterPaused := range []bool{false, true} {
		for _, annotated := range []bool{false, true} {
			cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}, Spec: clusterv1.ClusterSpec{Paused: ptr.To(clusterPaused)}}
			meta := metav1.ObjectMeta{Namespace: "ns", Name: "o", Generation: 3}
			if annotated {
				meta.Annotations = map[string]string{clusterv1.PausedAnnotation: ""}
			}
			for kind, obj := range map[string]pausable{
				"GoofyMachine": &infrav1.GoofyMachine{ObjectMeta: meta},
				"GoofyCluster": &infrav1.GoofyCluster{ObjectMeta: meta},
			} {
				theirs := obj.DeepCopyObject().(pausable)
				c := fake.NewClientBuilder().WithScheme(testScheme).WithObjects(theirs).WithStatusSubresource(theirs).Build()
				g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(theirs), theirs)).To(Succeed())
				wantPaused, _, err := paused.EnsurePausedCondition(context.Background(), c, cluster, theirs)
				g.Expect(err).NotTo(HaveOccurred())

				gotPaused := setPausedCondition(cluster, obj, kind)
				what := []any{"%s, Cluster paused %v, annotated %v", kind, clusterPaused, annotated}
				g.Expect(gotPaused).To(Equal(wantPaused), what...)
				want, got := conditions.Get(theirs, clusterv1.PausedCondition), conditions.Get(obj, clusterv1.PausedCondition)
				g.Expect(got).NotTo(BeNil(), what...)
				g.Expect([]any{got.Status, got.Reason, got.Message, got.ObservedGeneration}).
					To(Equal([]any{want.Status, want.Reason, want.Message, want.ObservedGeneration}), what...)
			}
		}
	}
}
