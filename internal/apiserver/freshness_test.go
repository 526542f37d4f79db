package apiserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// TestReadsAtAFutureResourceVersion asks for states the cluster has not reached, as a client does
// that saw a newer resourceVersion elsewhere: GET and LIST wait for it (client-go gets the object
// once a write reaches it) and after upstream's 3 s answer 504 "Too large resource version" with
// cause ResourceVersionTooLarge and Retry-After 1; a watch with sendInitialEvents gets that 504 as
// an ERROR event in a 200 stream; a plain watch from a future resourceVersion waits for the
// changes after it.
func TestReadsAtAFutureResourceVersion(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, Options{})
	cs := env.clientset(t)
	cms := cs.CoreV1().ConfigMaps("default")
	cm, err := cms.Create(ctx(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	rv, err := strconv.ParseUint(cm.ResourceVersion, 10, 64)
	g.Expect(err).NotTo(HaveOccurred())
	next := strconv.FormatUint(rv+1, 10)

	// The next write's resourceVersion: a GET and a plain watch from it wait for that write.
	w, err := cms.Watch(ctx(t), metav1.ListOptions{ResourceVersion: next})
	g.Expect(err).NotTo(HaveOccurred())
	defer w.Stop()
	got := make(chan error, 1)
	go func() {
		out, err := cms.Get(ctx(t), "a", metav1.GetOptions{ResourceVersion: next})
		if err == nil && out.Labels["round"] != "1" {
			err = fmt.Errorf("got %v at resourceVersion %s, want the write that reached %s", out.Labels, out.ResourceVersion, next)
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond)
	g.Expect(got).NotTo(Receive(), "the GET waits for resourceVersion %s", next)
	for round := 1; round <= 2; round++ {
		cm.Labels = map[string]string{"round": strconv.Itoa(round)}
		cm, err = cms.Update(ctx(t), cm, metav1.UpdateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Eventually(got, 2*time.Second).Should(Receive(BeNil()))
	select {
	case ev := <-w.ResultChan():
		g.Expect(ev.Type).To(Equal(watch.Modified))
		g.Expect(ev.Object.(*corev1.ConfigMap).Labels).To(HaveKeyWithValue("round", "2"), "events after %s only", next)
	case <-time.After(5 * time.Second):
		t.Fatal("the watch from a future resourceVersion saw no change after it")
	}

	// A state that does not come: 504 after about 3 s, as the watch cache answers.
	cur := cm.ResourceVersion
	future := strconv.FormatUint(rv+1_000_000, 10)
	wantMsg := fmt.Sprintf("Timeout: Too large resource version: %s, current: %s", future, cur)
	type answer struct {
		took time.Duration
		code int
		hdr  http.Header
		body string
	}
	watchPath := "/api/v1/namespaces/default/configmaps?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&resourceVersion=" + future
	paths := []string{
		"/api/v1/namespaces/default/configmaps/a?resourceVersion=" + future,
		"/api/v1/namespaces/default/configmaps?resourceVersion=" + future,
		"/api/v1/namespaces/default/configmaps?resourceVersion=" + future + "&resourceVersionMatch=NotOlderThan",
		watchPath,
	}
	answers := make([]answer, len(paths))
	var wg sync.WaitGroup
	for i, path := range paths { // at once: each waits out the 3 s
		wg.Go(func() {
			start := time.Now()
			code, hdr, body := env.do(t, http.MethodGet, path, "", "application/json", "")
			answers[i] = answer{time.Since(start), code, hdr, body}
		})
	}
	wg.Wait()
	for i, path := range paths {
		a := answers[i]
		g.Expect(a.took).To(BeNumerically(">=", store.FreshWait), path)
		if path == watchPath {
			continue
		}
		g.Expect(a.code).To(Equal(http.StatusGatewayTimeout), "%s: %s", path, a.body)
		g.Expect(a.hdr.Get("Retry-After")).To(Equal("1"), path)
		var status metav1.Status
		g.Expect(json.Unmarshal([]byte(a.body), &status)).To(Succeed())
		g.Expect(status.Reason).To(Equal(metav1.StatusReasonTimeout))
		g.Expect(status.Message).To(Equal(wantMsg))
		g.Expect(status.Details.Causes).To(ContainElement(HaveField("Type", metav1.CauseTypeResourceVersionTooLarge)))
	}
	code, _, body := env.do(t, http.MethodGet, "/api/v1/namespaces/default/configmaps/a?resourceVersion=x", "", "application/json", "")
	g.Expect(code).To(Equal(http.StatusBadRequest), body)

	code, body = answers[3].code, answers[3].body
	g.Expect(code).To(Equal(http.StatusOK), body)
	var ev struct {
		Type   watch.EventType `json:"type"`
		Object metav1.Status   `json:"object"`
	}
	g.Expect(json.NewDecoder(strings.NewReader(body)).Decode(&ev)).To(Succeed(), body)
	g.Expect(ev.Type).To(Equal(watch.Error))
	g.Expect(ev.Object.Code).To(BeEquivalentTo(http.StatusGatewayTimeout))
	g.Expect(ev.Object.Message).To(Equal(wantMsg))
}
