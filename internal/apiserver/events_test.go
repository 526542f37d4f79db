package apiserver

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
)

// client-go's events.k8s.io recorder (what kube-scheduler and newer controllers use) and its core
// Events clients see one collection: what the recorder writes, `kubectl get events`-style core
// lists and an events.k8s.io informer both see, and core Events show up in that informer.
func TestEventsRecorderAndCoreClientsShareOneCollection(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, Options{})
	cs := env.clientset(t)
	c, cancel := context.WithCancel(ctx(t))
	defer cancel()

	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace("default"))
	informer := factory.Events().V1().Events().Informer()
	factory.Start(c.Done())
	g.Expect(cache.WaitForCacheSync(c.Done(), informer.HasSynced)).To(BeTrue())

	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	g.Expect(broadcaster.StartRecordingToSinkWithContext(c)).To(Succeed())
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, "example.com/scheduler")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u-1"}}
	pod.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	recorder.Eventf(pod, nil, corev1.EventTypeNormal, "Scheduled", "Binding", "Successfully assigned default/web to n1")

	var core corev1.Event
	g.Eventually(func() ([]corev1.Event, error) {
		list, err := cs.CoreV1().Events("default").List(c, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "web").String()})
		if err != nil {
			return nil, err
		}
		if len(list.Items) > 0 {
			core = list.Items[0]
		}
		return list.Items, nil
	}, 10*time.Second, 100*time.Millisecond).Should(HaveLen(1))
	g.Expect(core.Reason).To(Equal("Scheduled"))
	g.Expect(core.Message).To(Equal("Successfully assigned default/web to n1"))
	g.Expect(core.ReportingController).To(Equal("example.com/scheduler"))
	g.Eventually(func() []any { return informer.GetStore().List() }, 5*time.Second).Should(ContainElement(
		HaveField("Note", "Successfully assigned default/web to n1")))

	// An event written the old way (core/v1, as client-go's record package does) reaches the
	// events.k8s.io informer too.
	_, err := cs.CoreV1().Events("default").Create(c, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "old-style"},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "n1"}, Reason: "NodeReady", Message: "ready",
		Type: corev1.EventTypeNormal, Source: corev1.EventSource{Component: "kubelet"}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() []any { return informer.GetStore().List() }, 5*time.Second).Should(ContainElement(
		And(HaveField("Name", "old-style"), HaveField("Regarding.Name", "n1"), HaveField("DeprecatedSource.Component", "kubelet"))))
	viaV1, err := cs.EventsV1().Events("default").Get(c, "old-style", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(viaV1.Note).To(Equal("ready"))
}
