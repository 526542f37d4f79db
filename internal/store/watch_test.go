package store

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// currentRV returns the cluster's latest resourceVersion.
func currentRV(t testing.TB, c *Cluster) string {
	l, err := c.List(namespacesGVR, "", ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.(*corev1.NamespaceList).ResourceVersion
}

func startWatch(t testing.TB, c *Cluster, gvr schemaGVR, ns string, opts ListOptions) watch.Interface {
	t.Helper()
	w, err := c.Watch(gvr, ns, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

func TestWatchFiltering(t *testing.T) {
	sel := func(s string) labels.Selector { l, _ := labels.Parse(s); return l }
	fsel := func(s string) fields.Selector { f, _ := fields.ParseSelector(s); return f }
	setLabel := func(c *Cluster, ns, name, value string) {
		patch := fmt.Sprintf(`{"metadata":{"labels":{"app":%q}}}`, value)
		if _, err := c.Patch(podsGVR, ns, name, types.MergePatchType, []byte(patch), PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		ns   string
		opts ListOptions
		act  func(c *Cluster)
		want []eventSummary
	}{
		{"namespace", "kube-system", ListOptions{}, func(c *Cluster) {
			mustCreate(t, c, pod("default", "other", nil))
			mustCreate(t, c, pod("kube-system", "mine", nil))
		}, []eventSummary{{watch.Added, "mine"}}},
		{"label selector with transitions", "", ListOptions{LabelSelector: sel("app=web")}, func(c *Cluster) {
			mustCreate(t, c, pod("default", "p", map[string]string{"app": "db"})) // not matching
			setLabel(c, "default", "p", "web")                                    // starts matching: ADDED
			setLabel(c, "default", "p", "web")                                    // no-op: nothing
			mustCreate(t, c, pod("default", "q", map[string]string{"app": "web"}))
			if _, err := c.Patch(podsGVR, "default", "q", types.MergePatchType, []byte(`{"metadata":{"annotations":{"x":"y"}}}`), PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			setLabel(c, "default", "p", "db") // stops matching: DELETED
			if _, err := c.Delete(podsGVR, "default", "q", DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, []eventSummary{{watch.Added, "p"}, {watch.Added, "q"}, {watch.Modified, "q"}, {watch.Deleted, "p"}, {watch.Deleted, "q"}}},
		{"field selector spec.nodeName", "", ListOptions{FieldSelector: fsel("spec.nodeName=n1")}, func(c *Cluster) {
			p := pod("default", "unscheduled", nil)
			mustCreate(t, c, p)
			s := pod("default", "scheduled", nil)
			s.Spec.NodeName = "n1"
			mustCreate(t, c, s)
		}, []eventSummary{{watch.Added, "scheduled"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestCluster(t)
			w := startWatch(t, c, podsGVR, tt.ns, ListOptions{LabelSelector: tt.opts.LabelSelector, FieldSelector: tt.opts.FieldSelector,
				ResourceVersion: currentRV(t, c)})
			tt.act(c)
			// A final matching-for-everyone sentinel proves nothing else was delivered in between.
			sentinel := pod(ptr.Deref(ptrIfEmpty(tt.ns), "default"), "zz-sentinel", map[string]string{"app": "web"})
			sentinel.Spec.NodeName = "n1"
			mustCreate(t, c, sentinel)
			expectEvents(t, w, append(tt.want, eventSummary{watch.Added, "zz-sentinel"})...)
		})
	}
}

func ptrIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func TestWatchDeletedEventOnSelectorExitCarriesNewRV(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	mustCreate(t, c, pod("default", "p", map[string]string{"app": "web"}))
	sel, _ := labels.Parse("app=web")
	w := startWatch(t, c, podsGVR, "", ListOptions{LabelSelector: sel, ResourceVersion: currentRV(t, c)})
	out, err := c.Patch(podsGVR, "default", "p", types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"db"}}}`), PatchOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	ev := nextEvent(t, w)
	g.Expect(ev.Type).To(Equal(watch.Deleted))
	p := ev.Object.(*corev1.Pod)
	g.Expect(p.Labels).To(HaveKeyWithValue("app", "web"), "previous state")
	g.Expect(p.ResourceVersion).To(Equal(out.(*corev1.Pod).ResourceVersion))
}

func TestWatchInitialEvents(t *testing.T) {
	t.Run("sendInitialEvents ends with the initial-events-end bookmark", func(t *testing.T) {
		g := NewWithT(t)
		c := newTestCluster(t)
		mustCreate(t, c, pod("default", "a", nil))
		mustCreate(t, c, pod("default", "b", nil))
		rv := currentRV(t, c)
		w := startWatch(t, c, podsGVR, "", ListOptions{SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true,
			ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
		expectEvents(t, w, eventSummary{watch.Added, "a"}, eventSummary{watch.Added, "b"})
		ev := nextEvent(t, w)
		g.Expect(ev.Type).To(Equal(watch.Bookmark))
		obj := ev.Object.(client.Object)
		g.Expect(obj.GetAnnotations()).To(HaveKeyWithValue(metav1.InitialEventsAnnotationKey, "true"))
		g.Expect(obj.GetResourceVersion()).To(Equal(rv))
		mustCreate(t, c, pod("default", "c", nil))
		expectEvents(t, w, eventSummary{watch.Added, "c"})
	})
	t.Run("sendInitialEvents requires resourceVersionMatch NotOlderThan", func(t *testing.T) {
		c := newTestCluster(t)
		_, err := c.Watch(podsGVR, "", ListOptions{SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true})
		NewWithT(t).Expect(apierrors.IsInvalid(err)).To(BeTrue())
	})
	t.Run("legacy resourceVersion 0 sends synthetic ADDED events", func(t *testing.T) {
		c := newTestCluster(t)
		mustCreate(t, c, pod("default", "a", nil))
		w := startWatch(t, c, podsGVR, "", ListOptions{ResourceVersion: "0"})
		mustCreate(t, c, pod("default", "b", nil))
		expectEvents(t, w, eventSummary{watch.Added, "a"}, eventSummary{watch.Added, "b"})
	})
	t.Run("sendInitialEvents=false starts at the given version", func(t *testing.T) {
		c := newTestCluster(t)
		mustCreate(t, c, pod("default", "a", nil))
		w := startWatch(t, c, podsGVR, "", ListOptions{SendInitialEvents: ptr.To(false), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, ResourceVersion: currentRV(t, c)})
		mustCreate(t, c, pod("default", "b", nil))
		expectEvents(t, w, eventSummary{watch.Added, "b"})
	})
}

func TestWatchResumeAndExpiry(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t, ClusterOptions{EventHistory: 16})
	rv := currentRV(t, c)
	mustCreate(t, c, pod("default", "a", nil))
	mustCreate(t, c, configMap("default", "unrelated", nil))
	mustCreate(t, c, pod("default", "b", nil))
	if _, err := c.Delete(podsGVR, "default", "a", DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Resuming replays exactly the events after rv.
	w := startWatch(t, c, podsGVR, "", ListOptions{ResourceVersion: rv})
	expectEvents(t, w, eventSummary{watch.Added, "a"}, eventSummary{watch.Added, "b"}, eventSummary{watch.Deleted, "a"})

	// Once the history no longer reaches back, 410 Gone with reason Expired.
	for i := 0; i < 20; i++ {
		mustCreate(t, c, configMap("default", fmt.Sprintf("cm-%d", i), nil))
	}
	_, err := c.Watch(podsGVR, "", ListOptions{ResourceVersion: rv})
	g.Expect(apierrors.IsResourceExpired(err)).To(BeTrue())
	g.Expect(err.(apierrors.APIStatus).Status().Code).To(Equal(int32(410)))
	g.Expect(err.(apierrors.APIStatus).Status().Reason).To(Equal(metav1.StatusReasonExpired))
}

func TestSlowWatcherIsClosedWithoutBlockingWriters(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t, ClusterOptions{EventHistory: 32})
	slow := startWatch(t, c, configMapsGVR, "", ListOptions{ResourceVersion: currentRV(t, c)})
	fast := startWatch(t, c, configMapsGVR, "", ListOptions{ResourceVersion: currentRV(t, c)})

	// The slow watcher never reads while these writes happen; if writers waited on it, this would
	// hang. The fast watcher reads each event as it comes and is not held back.
	const writes = 200
	for i := 0; i < writes; i++ {
		name := fmt.Sprintf("cm-%03d", i)
		mustCreate(t, c, configMap("default", name, nil))
		expectEvents(t, fast, eventSummary{watch.Added, name})
	}

	// The slow watcher gets what it had in hand, then its watch ends.
	n := 0
	for range slow.ResultChan() {
		n++
	}
	g.Expect(n).To(BeNumerically("<", writes))
}

func TestWatchTimeoutAndStop(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	w := startWatch(t, c, podsGVR, "", ListOptions{TimeoutSeconds: ptr.To[int64](1), ResourceVersion: currentRV(t, c)})
	select {
	case _, ok := <-w.ResultChan():
		g.Expect(ok).To(BeFalse(), "the watch ends after timeoutSeconds")
	case <-time.After(safetyTimeout):
		t.Fatal("watch did not time out")
	}

	w2, err := c.Watch(podsGVR, "", ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	w2.Stop()
	w2.Stop() // idempotent
	for range w2.ResultChan() {
	}
}

func TestWatchPeriodicBookmarks(t *testing.T) {
	g := NewWithT(t)
	old := bookmarkInterval
	bookmarkInterval = 10 * time.Millisecond
	t.Cleanup(func() { bookmarkInterval = old })
	c := newTestCluster(t)
	w := startWatch(t, c, podsGVR, "", ListOptions{AllowWatchBookmarks: true, ResourceVersion: currentRV(t, c)})
	// Other kinds advance the RV; the bookmark reports progress past them.
	mustCreate(t, c, configMap("default", "cm", nil))
	want, _ := strconv.Atoi(currentRV(t, c))
	for {
		ev := nextEvent(t, w)
		g.Expect(ev.Type).To(Equal(watch.Bookmark))
		rv, _ := strconv.Atoi(ev.Object.(client.Object).GetResourceVersion())
		g.Expect(ev.Object.(client.Object).GetAnnotations()).To(BeEmpty())
		if rv == want {
			break
		}
		g.Expect(rv).To(BeNumerically("<", want))
	}

	// Without allowWatchBookmarks there are none: the next event is the real one.
	w2 := startWatch(t, c, podsGVR, "", ListOptions{ResourceVersion: currentRV(t, c)})
	time.Sleep(5 * bookmarkInterval) // give a wrongly sent bookmark the chance to arrive first
	mustCreate(t, c, pod("default", "p", nil))
	expectEvents(t, w2, eventSummary{watch.Added, "p"})
}

func TestDeleteClusterEndsWatches(t *testing.T) {
	m := NewManager()
	c, _ := m.AddCluster("x", ClusterOptions{})
	w, err := c.Watch(podsGVR, "", ListOptions{})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	m.DeleteCluster("x")
	for range w.ResultChan() {
	}
	_, err = c.Watch(podsGVR, "", ListOptions{})
	NewWithT(t).Expect(apierrors.IsServiceUnavailable(err)).To(BeTrue())
}

func TestWatcherSurvivesChurnOfOtherKinds(t *testing.T) {
	c := newTestCluster(t, ClusterOptions{EventHistory: 8})
	rv := currentRV(t, c)
	w := startWatch(t, c, podsGVR, "", ListOptions{ResourceVersion: rv})
	// Far more config map changes than the history holds: none of them concern the pod watcher.
	for i := 0; i < 50; i++ {
		mustCreate(t, c, configMap("default", fmt.Sprintf("cm-%d", i), nil))
	}
	mustCreate(t, c, pod("default", "p", nil))
	expectEvents(t, w, eventSummary{watch.Added, "p"})
	// Resuming pods from before the churn is still possible too.
	w2 := startWatch(t, c, podsGVR, "", ListOptions{ResourceVersion: rv})
	expectEvents(t, w2, eventSummary{watch.Added, "p"})
}

func TestHistoryExpiresByAge(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t, ClusterOptions{EventHistoryTTL: time.Nanosecond})
	rv := currentRV(t, c)
	mustCreate(t, c, configMap("default", "a", nil))
	mustCreate(t, c, configMap("default", "b", nil)) // drops the now too old event of "a"
	_, err := c.Watch(configMapsGVR, "", ListOptions{ResourceVersion: rv})
	g.Expect(apierrors.IsResourceExpired(err)).To(BeTrue(), "got %v", err)
}

func TestIdleClusterReleasesItsHistory(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t, ClusterOptions{EventHistoryTTL: 20 * time.Millisecond})
	mustCreate(t, c, configMap("default", "a", nil))
	// No further writes: the expiry timer alone empties the history and frees its ring.
	g.Eventually(func() bool {
		c.mu.RLock()
		defer c.mu.RUnlock()
		n, _, capacity := c.objs.RetainedEvents()
		return n == 0 && capacity == 0 && c.expiry == nil
	}, safetyTimeout, 5*time.Millisecond).Should(BeTrue())
	g.Expect(exists(c, configMap("default", "a", nil))).To(BeTrue(), "objects stay")
	// The next write records history again.
	mustCreate(t, c, configMap("default", "b", nil))
	c.mu.RLock()
	n, _, _ := c.objs.RetainedEvents()
	c.mu.RUnlock()
	g.Expect(n).To(Equal(1))
}
