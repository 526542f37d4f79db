package store

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestStorageQuotaAnswersAsAFullEtcd(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t, ClusterOptions{StorageQuota: 256 << 10})
	pad := strings.Repeat("x", 32<<10)
	held := configMap("default", "held", map[string]string{"pad": pad})
	held.Finalizers = []string{"example.com/hold"}
	mustCreate(t, c, held)
	var err error
	n := 0
	for ; n < 100; n++ {
		_, err = c.Create(configMapsGVR, "default", configMap("default", fmt.Sprintf("cm-%d", n), map[string]string{"pad": pad}), CreateOptions{})
		if err != nil {
			break
		}
	}
	g.Expect(n).To(BeNumerically(">=", 6), "the quota refused writes well below it")
	g.Expect(c.StoredBytes()).To(BeNumerically(">=", 256<<10))
	status, ok := err.(*apierrors.StatusError)
	g.Expect(ok).To(BeTrue(), "%v", err)
	g.Expect(status.Status().Code).To(Equal(int32(http.StatusInternalServerError)))
	g.Expect(status.Status().Reason).To(BeEmpty())
	g.Expect(status.Status().Message).To(Equal("etcdserver: mvcc: database space exceeded"))

	// A growing update is refused too; one that does not grow passes (a finalizer can go).
	grow := mustGet(t, c, held).(*corev1.ConfigMap)
	grow.Data["more"] = "y"
	_, err = c.Update(configMapsGVR, "default", grow, UpdateOptions{})
	g.Expect(err).To(MatchError(ContainSubstring("database space exceeded")))
	_, err = c.Delete(configMapsGVR, "default", "held", DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	release := mustGet(t, c, held).(*corev1.ConfigMap)
	release.Finalizers = nil
	_, err = c.Update(configMapsGVR, "default", release, UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exists(c, held)).To(BeFalse())

	// Deletes free space: writes pass again.
	for i := range n {
		_, err := c.Delete(configMapsGVR, "default", fmt.Sprintf("cm-%d", i), DeleteOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	mustCreate(t, c, configMap("default", "after", map[string]string{"pad": pad}))
	// No quota at all when negative.
	unbounded := newTestCluster(t, ClusterOptions{StorageQuota: -1})
	for i := range 12 {
		mustCreate(t, unbounded, configMap("default", fmt.Sprintf("cm-%d", i), map[string]string{"pad": pad}))
	}
}

func TestStoredBytesFollowWritesAndRestarts(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	m, closeDB := durableManager(t, dir)
	c, err := m.AddCluster("ns/a", ClusterOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	empty := c.StoredBytes()
	g.Expect(empty).To(BeNumerically(">", 0), "the default namespaces")
	cm := mustCreate(t, c, configMap("default", "x", map[string]string{"k": strings.Repeat("v", 10000)}))
	g.Expect(c.StoredBytes() - empty).To(BeNumerically("~", 10000, 500))
	upd := cm.DeepCopyObject().(*corev1.ConfigMap)
	upd.Data["k"] = "small"
	_, err = c.Update(configMapsGVR, "default", upd, UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.StoredBytes() - empty).To(BeNumerically("<", 500))
	withSmall := c.StoredBytes()
	closeDB()
	m, closeDB = durableManager(t, dir)
	defer closeDB()
	c, err = m.AddCluster("ns/a", ClusterOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.StoredBytes()).To(Equal(withSmall))
	_, err = c.Delete(configMapsGVR, "default", "x", DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.StoredBytes()).To(Equal(empty))
}

func TestWatchHistoryIsBoundedInBytes(t *testing.T) {
	g := NewWithT(t)
	// Room for 4096 events by count, but only for about three versions of a 300 KB object.
	c := newTestCluster(t, ClusterOptions{EventHistory: 4096, EventHistoryBytes: 1 << 20})
	big := strings.Repeat("x", 300<<10)
	first := mustCreate(t, c, configMap("default", "big", map[string]string{"k": big + "0"}))
	for i := 1; i < 10; i++ {
		cur := mustGet(t, c, first).(*corev1.ConfigMap)
		cur.Data["k"] = big + fmt.Sprint(i)
		_, err := c.Update(configMapsGVR, "default", cur, UpdateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	c.mu.RLock()
	retained, bytes, _ := c.objs.RetainedEvents()
	c.mu.RUnlock()
	g.Expect(bytes).To(BeNumerically("<=", 1<<20))
	g.Expect(retained).To(BeNumerically("<", 5))
	_, err := c.Watch(configMapsGVR, "default", ListOptions{ResourceVersion: first.GetResourceVersion()})
	g.Expect(apierrors.IsResourceExpired(err)).To(BeTrue(), "%v", err)
	// The newest change is always retained, however large.
	huge := newTestCluster(t, ClusterOptions{EventHistoryBytes: 1 << 10})
	before, err := huge.List(configMapsGVR, "default", ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	w, err := huge.Watch(configMapsGVR, "default", ListOptions{ResourceVersion: before.(metav1.ListInterface).GetResourceVersion()})
	g.Expect(err).NotTo(HaveOccurred())
	defer w.Stop()
	mustCreate(t, huge, configMap("default", "big", map[string]string{"k": big}))
	ev, ok := w.Next(nil)
	g.Expect(ok).To(BeTrue())
	g.Expect(ev.Object.(*corev1.ConfigMap).Name).To(Equal("big"))
}
