package apiserver

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// TestFailedCommitIsNeverVisible injects a failing commit (as a full disk fails one) into writes
// of one workload cluster while another cluster writes beside it: client-go's create and update
// get 500, and no reader ever sees the failed change (GET, LIST and a watch opened before it), the
// previous version is served again and takes the next update, the other cluster's writes all
// land, and after a restart the state holds exactly what was acknowledged.
func TestFailedCommitIsNeverVisible(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	db, err := storage.Open(dir)
	g.Expect(err).NotTo(HaveOccurred())
	m := store.NewManager(store.WithStorage(db))
	a, err := m.AddCluster("a", store.ClusterOptions{KubernetesVersion: testVersion})
	g.Expect(err).NotTo(HaveOccurred())
	b, err := m.AddCluster("b", store.ClusterOptions{KubernetesVersion: testVersion})
	g.Expect(err).NotTo(HaveOccurred())
	srv := httptest.NewServer(NewHandler(a, Options{}))
	defer srv.Close()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, QPS: -1, Timeout: 10 * time.Second})
	g.Expect(err).NotTo(HaveOccurred())
	cms := cs.CoreV1().ConfigMaps("default")

	victim, err := cms.Create(ctx(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "victim"}, Data: map[string]string{"v": "1"}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	w, err := cms.Watch(ctx(t), metav1.ListOptions{ResourceVersion: victim.ResourceVersion})
	g.Expect(err).NotTo(HaveOccurred())
	defer w.Stop()

	// Cluster b writes all along; its writes share batches with a's.
	var (
		bWrites   atomic.Int32
		bFailures []error
		bMu       sync.Mutex
		stop      = make(chan struct{})
		writing   sync.WaitGroup
	)
	writing.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_, err := b.Create(corev1.SchemeGroupVersion.WithResource("configmaps"), "default",
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("b-%d", i)}}, store.CreateOptions{})
			if err != nil {
				bMu.Lock()
				bFailures = append(bFailures, err)
				bMu.Unlock()
				return
			}
			bWrites.Add(1)
		}
	})

	injected := errors.New("injected: no space left on device")
	db.InjectFault(func(bucket, key string) error {
		if bucket == "a" && (strings.HasSuffix(key, "/default/bad") || strings.HasSuffix(key, "/default/victim")) {
			return injected
		}
		return nil
	})
	_, err = cms.Create(ctx(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bad"}}, metav1.CreateOptions{})
	g.Expect(apierrors.IsInternalError(err)).To(BeTrue(), "create: %v", err)
	g.Expect(err).To(MatchError(ContainSubstring("no space left on device")))
	changed := victim.DeepCopy()
	changed.Data["v"] = "2"
	_, err = cms.Update(ctx(t), changed, metav1.UpdateOptions{})
	g.Expect(apierrors.IsInternalError(err)).To(BeTrue(), "update: %v", err)
	db.InjectFault(nil)

	_, err = cms.Get(ctx(t), "bad", metav1.GetOptions{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the failed create is not served: %v", err)
	got, err := cms.Get(ctx(t), "victim", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Data).To(HaveKeyWithValue("v", "1"), "the failed update is not served")
	g.Expect(got.ResourceVersion).To(Equal(victim.ResourceVersion))
	list, err := cms.List(ctx(t), metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list.Items).To(ConsistOf(HaveField("ObjectMeta.Name", "victim")))

	// The previous version takes the next update (its resourceVersion is current again).
	changed.Data["v"] = "3"
	_, err = cms.Update(ctx(t), changed, metav1.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = cms.Create(ctx(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "good"}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	var events []string
	for len(events) < 2 {
		select {
		case ev := <-w.ResultChan():
			cm := ev.Object.(*corev1.ConfigMap)
			events = append(events, fmt.Sprintf("%s %s v=%s", ev.Type, cm.Name, cm.Data["v"]))
		case <-time.After(5 * time.Second):
			t.Fatalf("watch: got %v, want two events", events)
		}
	}
	g.Expect(events).To(Equal([]string{"MODIFIED victim v=3", "ADDED good v="}), "the watch never sees a failed change")
	g.Eventually(bWrites.Load).Should(BeNumerically(">", 20))
	close(stop)
	writing.Wait()
	g.Expect(bFailures).To(BeEmpty(), "the other cluster's writes")

	// After a restart: exactly what was acknowledged.
	g.Expect(db.Close()).To(Succeed())
	db, err = storage.Open(dir)
	g.Expect(err).NotTo(HaveOccurred())
	defer db.Close()
	m = store.NewManager(store.WithStorage(db))
	for name, want := range map[string]int{"a": 2, "b": int(bWrites.Load())} {
		c, err := m.AddCluster(name, store.ClusterOptions{KubernetesVersion: testVersion})
		g.Expect(err).NotTo(HaveOccurred())
		out, err := c.List(corev1.SchemeGroupVersion.WithResource("configmaps"), "default", store.ListOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out.(*corev1.ConfigMapList).Items).To(HaveLen(want), name)
		if name == "a" {
			v, err := c.Get(corev1.SchemeGroupVersion.WithResource("configmaps"), "default", "victim")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(v.(*corev1.ConfigMap).Data).To(HaveKeyWithValue("v", "3"))
		}
	}
}
