package store

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
)

// scheduledPod is a pod bound to a node, with the API server's default grace period (30 s).
func scheduledPod(ns, name string) *corev1.Pod {
	p := pod(ns, name, nil)
	p.Spec.NodeName = "node-0"
	return p
}

func deletePod(t *testing.T, c *Cluster, name string, grace *int64) *corev1.Pod {
	t.Helper()
	out, err := c.Delete(podsGVR, "default", name, DeleteOptions{GracePeriodSeconds: grace})
	if err != nil {
		t.Fatalf("delete %s: %v", name, err)
	}
	return out.(*corev1.Pod)
}

func TestPodOnANodeTerminatesGracefully(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t, ClusterOptions{KubernetesVersion: "v1.36.3", PodStopDelay: 300 * time.Millisecond})
	w, err := c.Watch(podsGVR, "default", ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	defer w.Stop()
	created := mustCreate(t, c, scheduledPod("default", "web"))

	start := time.Now()
	out := deletePod(t, c, "web", nil)
	g.Expect(out.DeletionGracePeriodSeconds).To(HaveValue(BeEquivalentTo(30)))
	g.Expect(out.DeletionTimestamp).NotTo(BeNil())
	g.Expect(out.DeletionTimestamp.Time).To(BeTemporally("~", start.Add(30*time.Second), 2*time.Second))
	g.Expect(exists(c, created)).To(BeTrue(), "the pod is Terminating until its kubelet stops it")

	// Deleting again with a longer or no grace period changes nothing.
	again := deletePod(t, c, "web", ptr.To[int64](60))
	g.Expect(again.ResourceVersion).To(Equal(out.ResourceVersion))

	// Watchers see it change to Terminating, then go once the kubelet confirms.
	var types []watch.EventType
	for len(types) < 3 {
		select {
		case ev := <-w.ResultChan():
			types = append(types, ev.Type)
		case <-time.After(5 * time.Second):
			t.Fatalf("events so far: %v", types)
		}
	}
	g.Expect(types).To(Equal([]watch.EventType{watch.Added, watch.Modified, watch.Deleted}))
	g.Expect(time.Since(start)).To(BeNumerically(">=", 300*time.Millisecond))
	g.Expect(exists(c, created)).To(BeFalse())
}

func TestGracePeriodRules(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t, ClusterOptions{KubernetesVersion: "v1.36.3", PodStopDelay: time.Hour})

	// Not on a node: deleted at once, whatever the grace period.
	unscheduled := mustCreate(t, c, pod("default", "pending", nil))
	deletePod(t, c, "pending", ptr.To[int64](30))
	g.Expect(exists(c, unscheduled)).To(BeFalse())

	// Finished pods go at once too.
	done := mustCreate(t, c, scheduledPod("default", "done"))
	donePod := done.(*corev1.Pod)
	donePod.Status.Phase = corev1.PodSucceeded
	_, err := c.Update(podsGVR, "default", donePod, UpdateOptions{FieldManager: "kubelet", Subresource: "status"})
	g.Expect(err).NotTo(HaveOccurred())
	deletePod(t, c, "done", nil)
	g.Expect(exists(c, done)).To(BeFalse())

	// The request's grace period wins over the pod's; negative means 1 s.
	p := scheduledPod("default", "short")
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](120)
	mustCreate(t, c, p)
	g.Expect(deletePod(t, c, "short", ptr.To[int64](5)).DeletionGracePeriodSeconds).To(HaveValue(BeEquivalentTo(5)))
	mustCreate(t, c, scheduledPod("default", "negative"))
	g.Expect(deletePod(t, c, "negative", ptr.To[int64](-3)).DeletionGracePeriodSeconds).To(HaveValue(BeEquivalentTo(1)))

	// A shorter grace period moves deletionTimestamp earlier; 0 (--force) removes the pod.
	long := mustCreate(t, c, scheduledPod("default", "long"))
	first := deletePod(t, c, "long", nil)
	shorter := deletePod(t, c, "long", ptr.To[int64](10))
	g.Expect(shorter.DeletionGracePeriodSeconds).To(HaveValue(BeEquivalentTo(10)))
	g.Expect(shorter.DeletionTimestamp.Time).To(Equal(first.DeletionTimestamp.Add(-20 * time.Second)))
	g.Expect(deletePod(t, c, "long", ptr.To[int64](-5)).DeletionGracePeriodSeconds).To(HaveValue(BeEquivalentTo(1)), "negative means 1 s here too")
	deletePod(t, c, "long", ptr.To[int64](0))
	g.Expect(exists(c, long)).To(BeFalse())

	// Dry run shows the graceful delete without doing it.
	dry := mustCreate(t, c, scheduledPod("default", "dry"))
	out, err := c.Delete(podsGVR, "default", "dry", DeleteOptions{DryRun: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.(*corev1.Pod).DeletionGracePeriodSeconds).To(HaveValue(BeEquivalentTo(30)))
	g.Expect(mustGet(t, c, dry).GetDeletionTimestamp()).To(BeNil())

	// Other kinds have no graceful deletion.
	cm := mustCreate(t, c, configMap("default", "cm", nil))
	_, err = c.Delete(configMapsGVR, "default", "cm", DeleteOptions{GracePeriodSeconds: ptr.To[int64](30)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exists(c, cm)).To(BeFalse())
}

func TestGracefulDeleteWithFinalizers(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t, ClusterOptions{KubernetesVersion: "v1.36.3", PodStopDelay: 200 * time.Millisecond})
	p := scheduledPod("default", "held")
	p.Finalizers = []string{"example.com/hold"}
	held := mustCreate(t, c, p)
	deletePod(t, c, "held", nil)

	// Removing the finalizer before the kubelet confirmed does not remove the pod.
	cur := mustGet(t, c, held).(*corev1.Pod)
	cur.Finalizers = nil
	_, err := c.Update(podsGVR, "default", cur, UpdateOptions{FieldManager: "test"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exists(c, held)).To(BeTrue())
	g.Eventually(func() bool { return exists(c, held) }, 5*time.Second, 20*time.Millisecond).Should(BeFalse())

	// With the finalizer still there, the kubelet's confirmation leaves grace period 0 and the
	// pod stays until the finalizer goes.
	p = scheduledPod("default", "held2")
	p.Finalizers = []string{"example.com/hold"}
	held2 := mustCreate(t, c, p)
	deletePod(t, c, "held2", nil)
	g.Eventually(func() *int64 { return mustGet(t, c, held2).GetDeletionGracePeriodSeconds() }, 5*time.Second, 20*time.Millisecond).
		Should(HaveValue(BeEquivalentTo(0)))
	cur = mustGet(t, c, held2).(*corev1.Pod)
	cur.Finalizers = nil
	_, err = c.Update(podsGVR, "default", cur, UpdateOptions{FieldManager: "test"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exists(c, held2)).To(BeFalse())
}

func TestNamespaceWaitsForTerminatingPods(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t, ClusterOptions{KubernetesVersion: "v1.36.3", PodStopDelay: 200 * time.Millisecond})
	ns := mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}})
	running := mustCreate(t, c, scheduledPod("apps", "web"))
	_, err := c.Delete(namespacesGVR, "", "apps", DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(mustGet(t, c, running).GetDeletionTimestamp()).NotTo(BeNil())
	g.Expect(exists(c, ns)).To(BeTrue(), "the namespace waits for its pods")
	_, err = c.Create(podsGVR, "apps", pod("apps", "late", nil), CreateOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
	g.Eventually(func() bool { return exists(c, ns) }, 5*time.Second, 20*time.Millisecond).Should(BeFalse())
	g.Expect(exists(c, running)).To(BeFalse())
}

// A pod replaced under the same name before the kubelet answered is not touched.
func TestKubeletConfirmationMatchesTheUID(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t, ClusterOptions{KubernetesVersion: "v1.36.3", PodStopDelay: 200 * time.Millisecond})
	mustCreate(t, c, scheduledPod("default", "web"))
	deletePod(t, c, "web", nil)
	deletePod(t, c, "web", ptr.To[int64](0))
	again := mustCreate(t, c, scheduledPod("default", "web"))
	time.Sleep(400 * time.Millisecond)
	g.Expect(mustGet(t, c, again).GetDeletionTimestamp()).To(BeNil())
	g.Expect(mustGet(t, c, again).GetUID()).To(Equal(again.GetUID()))
}

// The pods of a deleted node are force-deleted, as the pod garbage collector does: no kubelet
// is left to confirm their termination.
func TestPodsOfADeletedNodeAreCollected(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t, ClusterOptions{KubernetesVersion: "v1.36.3", PodStopDelay: time.Hour})
	node := mustCreate(t, c, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}})
	running := mustCreate(t, c, scheduledPod("default", "running"))
	terminating := mustCreate(t, c, scheduledPod("default", "terminating"))
	deletePod(t, c, "terminating", nil) // waits for a kubelet that will not answer within the test
	p := scheduledPod("default", "held")
	p.Finalizers = []string{"example.com/hold"}
	held := mustCreate(t, c, p)
	other := scheduledPod("default", "elsewhere")
	other.Spec.NodeName = "node-1"
	elsewhere := mustCreate(t, c, other)

	_, err := c.Delete(nodesGVR, "", "node-0", DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exists(c, node)).To(BeFalse())
	g.Expect(exists(c, running)).To(BeFalse())
	g.Expect(exists(c, terminating)).To(BeFalse())
	g.Expect(mustGet(t, c, held).GetDeletionTimestamp()).NotTo(BeNil(), "finalizers still hold a pod")
	g.Expect(mustGet(t, c, held).GetDeletionGracePeriodSeconds()).To(HaveValue(BeEquivalentTo(0)))
	g.Expect(mustGet(t, c, elsewhere).GetDeletionTimestamp()).To(BeNil())
}

// The kubelet reacts to the committed change: a shorter grace period given to a terminating pod
// makes it stop that much sooner, as a real kubelet does.
func TestShorterGracePeriodStopsThePodSooner(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t, ClusterOptions{KubernetesVersion: "v1.36.3", PodStopDelay: time.Hour})
	created := mustCreate(t, c, scheduledPod("default", "slow"))
	deletePod(t, c, "slow", nil) // 30 s: the kubelet would stop it in 30 s
	shortened := deletePod(t, c, "slow", ptr.To[int64](1))
	g.Expect(shortened.DeletionGracePeriodSeconds).To(HaveValue(BeEquivalentTo(1)))
	g.Eventually(func() bool { return exists(c, created) }).WithTimeout(5 * time.Second).Should(BeFalse())
}

// The garbage collector reacts to committed changes of owner references: a dependent that drops
// its blocking reference lets its owner's foreground deletion finish.
func TestOrphaningTheBlockingDependentFinishesForegroundDeletion(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	owner := mustCreate(t, c, configMap("default", "owner", nil))
	dep := configMap("default", "dep", nil)
	dep.Finalizers = []string{"example.com/hold"}
	dep.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: owner.GetUID(), BlockOwnerDeletion: ptr.To(true)}}
	mustCreate(t, c, dep)
	_, err := c.Delete(corev1.SchemeGroupVersion.WithResource("configmaps"), "default", "owner",
		DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exists(c, owner)).To(BeTrue(), "the finalizer-held dependent blocks its owner")

	cur := mustGet(t, c, dep).(*corev1.ConfigMap)
	cur.OwnerReferences = nil
	_, err = c.Update(corev1.SchemeGroupVersion.WithResource("configmaps"), "default", cur, UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = c.Get(corev1.SchemeGroupVersion.WithResource("configmaps"), "default", "owner")
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no dependent blocks it any more")
}
