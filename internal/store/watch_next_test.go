package store

import (
	"testing"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// TestWatcherNext: a watch read with Next runs no goroutine of the store, delivers the initial
// state and later changes in order, and is forgotten by its cluster once it ends.
func TestWatcherNext(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	mustCreate(t, c, configMap("default", "a", nil))
	before := goleak.IgnoreCurrent()

	w, err := c.Watch(configMapsGVR, "default", ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(goleak.Find(before)).To(Succeed(), "an open watch read with Next starts no goroutine")

	ev, ok := w.Next(nil)
	g.Expect(ok).To(BeTrue())
	g.Expect(ev.Type).To(Equal(watch.Added))
	g.Expect(ev.Object.(*corev1.ConfigMap).Name).To(Equal("a"))

	mustCreate(t, c, configMap("default", "b", nil))
	mustCreate(t, c, configMap("kube-system", "filtered-out", nil))
	mustCreate(t, c, configMap("default", "c", nil))
	for _, name := range []string{"b", "c"} {
		ev, ok = w.Next(nil)
		g.Expect(ok).To(BeTrue())
		g.Expect(ev.Type).To(Equal(watch.Added))
		g.Expect(ev.Object.(*corev1.ConfigMap).Name).To(Equal(name))
	}

	// A closed cancel channel ends a waiting Next, and the watch with it.
	cancel := make(chan struct{})
	close(cancel)
	_, ok = w.Next(cancel)
	g.Expect(ok).To(BeFalse())
	_, ok = w.Next(nil)
	g.Expect(ok).To(BeFalse(), "an ended watch stays ended")
	c.mu.RLock()
	g.Expect(c.watchers).To(BeEmpty(), "the ended watch is released")
	c.mu.RUnlock()

	// Deleting the cluster ends a watch read with Next.
	w2, err := c.Watch(configMapsGVR, "default", ListOptions{ResourceVersion: currentRV(t, c)})
	g.Expect(err).NotTo(HaveOccurred())
	c.close()
	_, ok = w2.Next(nil)
	g.Expect(ok).To(BeFalse())
	w2.Stop()
}
