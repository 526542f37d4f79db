package simulate_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/simulate"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// The kubelets' part of pod deletion (podtermination.go), in a cluster with workloads off.

func TestPodOnANodeTerminatesGracefully(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t, simulate.Options{PodStopDelay: 300 * time.Millisecond})
	w, err := c.Watch(podsGVR, "default", store.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	defer w.Stop()
	created := mustCreate(t, c, scheduledPod("default", "web"))

	start := time.Now()
	out := deletePod(t, c, "web", nil)
	g.Expect(out.DeletionGracePeriodSeconds).To(HaveValue(BeEquivalentTo(30)))
	g.Expect(out.DeletionTimestamp).NotTo(BeNil())
	g.Expect(out.DeletionTimestamp.Time).To(BeTemporally("~", start.Add(30*time.Second), 2*time.Second))
	g.Expect(exists(t, c, created)).To(BeTrue(), "the pod is Terminating until its kubelet stops it")

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
	g.Expect(exists(t, c, created)).To(BeFalse())
}

func TestGracefulDeleteWithFinalizers(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t, simulate.Options{PodStopDelay: 200 * time.Millisecond})
	p := scheduledPod("default", "held")
	p.Finalizers = []string{"example.com/hold"}
	held := mustCreate(t, c, p)
	deletePod(t, c, "held", nil)

	// Removing the finalizer before the kubelet confirmed does not remove the pod.
	cur := mustGet(t, c, held).(*corev1.Pod)
	cur.Finalizers = nil
	_, err := c.Update(podsGVR, "default", cur, store.UpdateOptions{FieldManager: "test"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exists(t, c, held)).To(BeTrue())
	g.Eventually(func() bool { return exists(t, c, held) }, 5*time.Second, 20*time.Millisecond).Should(BeFalse())

	// With the finalizer still there, the kubelet's confirmation leaves grace period 0 and the
	// pod stays until the finalizer goes.
	p = scheduledPod("default", "held2")
	p.Finalizers = []string{"example.com/hold"}
	held2 := mustCreate(t, c, p)
	deletePod(t, c, "held2", nil)
	g.Eventually(func() *int64 { return mustGet(t, c, held2).GetDeletionGracePeriodSeconds() }, 5*time.Second, 20*time.Millisecond).
		Should(HaveValue(BeEquivalentTo(0)))
	cur = mustGet(t, c, held2).(*corev1.Pod)
	g.Expect(cur.Status.Phase).To(Equal(corev1.PodFailed), "the kubelet reports the terminal phase of a pod finalizers keep")
	cur.Finalizers = nil
	_, err = c.Update(podsGVR, "default", cur, store.UpdateOptions{FieldManager: "test"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exists(t, c, held2)).To(BeFalse())
}

func TestNamespaceWaitsForTerminatingPods(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t, simulate.Options{PodStopDelay: 200 * time.Millisecond})
	ns := mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}})
	running := mustCreate(t, c, scheduledPod("apps", "web"))
	_, err := c.Delete(namespacesGVR, "", "apps", store.DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() *metav1.Time { return mustGet(t, c, running).GetDeletionTimestamp() }, safetyTimeout, poll).NotTo(BeNil())
	g.Expect(exists(t, c, ns)).To(BeTrue(), "the namespace waits for its pods")
	_, err = c.Create(podsGVR, "apps", pod("apps", "late", nil), store.CreateOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
	g.Eventually(func() bool { return exists(t, c, ns) }, 5*time.Second, 20*time.Millisecond).Should(BeFalse())
	g.Expect(exists(t, c, running)).To(BeFalse())
}

// A pod replaced under the same name before the kubelet answered is not touched.
func TestKubeletConfirmationMatchesTheUID(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t, simulate.Options{PodStopDelay: 200 * time.Millisecond})
	mustCreate(t, c, scheduledPod("default", "web"))
	deletePod(t, c, "web", nil)
	deletePod(t, c, "web", ptr.To[int64](0))
	again := mustCreate(t, c, scheduledPod("default", "web"))
	// Past the first pod's stop delay, the second is still untouched.
	g.Consistently(func() *metav1.Time { return mustGet(t, c, again).GetDeletionTimestamp() }, 400*time.Millisecond, 20*time.Millisecond).Should(BeNil())
	g.Expect(mustGet(t, c, again).GetUID()).To(Equal(again.GetUID()))
}

// The kubelet reacts to the committed change: a shorter grace period given to a terminating pod
// makes it stop that much sooner, as a real kubelet does.
func TestShorterGracePeriodStopsThePodSooner(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t, simulate.Options{PodStopDelay: time.Hour})
	created := mustCreate(t, c, scheduledPod("default", "slow"))
	deletePod(t, c, "slow", nil) // 30 s: the kubelet would stop it in 30 s
	shortened := deletePod(t, c, "slow", ptr.To[int64](1))
	g.Expect(shortened.DeletionGracePeriodSeconds).To(HaveValue(BeEquivalentTo(1)))
	g.Eventually(func() bool { return exists(t, c, created) }).WithTimeout(5 * time.Second).Should(BeFalse())
}

// A pod that was terminating when the process stopped is confirmed by the kubelets of the next
// life, from the state on disk.
func TestTerminatingPodIsConfirmedAfterRestart(t *testing.T) {
	g := NewWithT(t)
	db, err := storage.Open(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = db.Close() })
	first := newComponentCluster(t, simulate.Options{PodStopDelay: time.Hour}, db) // the kubelet of this life never confirms
	c := first.cluster
	p := pod("default", "p", nil)
	p.Spec.NodeName = "n1"
	p.Spec.TerminationGracePeriodSeconds = ptr.To(int64(30))
	mustCreate(t, c, p)
	_, err = c.Delete(podsGVR, "default", "p", store.DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(mustGet(t, c, p).GetDeletionTimestamp()).NotTo(BeNil())
	first.manager.Close()

	c = newComponentCluster(t, simulate.Options{PodStopDelay: 10 * time.Millisecond}, db).cluster
	g.Eventually(func() bool { return exists(t, c, p) }, safetyTimeout, poll).Should(BeFalse())
}
