package simulate_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/simulate"
)

func scheduledEvents(g Gomega, e *env) []eventsv1.Event {
	list, err := e.cs.EventsV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: "reason=Scheduled"})
	g.Expect(err).NotTo(HaveOccurred())
	return list.Items
}

func runPod(g Gomega, e *env, name string) {
	ctx := context.Background()
	_, err := e.cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		p, err := e.cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
}

// TestScheduledEvents: with ScheduledEvents the scheduler records kube-scheduler's Scheduled
// event for each pod it binds; events expire EventTTL after they were written, as
// kube-apiserver's --event-ttl has them.
func TestScheduledEvents(t *testing.T) {
	g := NewWithT(t)
	e := newEnvWith(t, nil, simulate.Options{ScheduledEvents: true, EventTTL: 2 * time.Second})
	e.addKubeadmObjects()
	e.addNode("worker-0", "10.0.0.20", false)
	runPod(g, e, "web")
	evs := scheduledEvents(g, e)
	g.Expect(evs).To(HaveLen(1))
	ev := evs[0]
	g.Expect(ev.Note).To(Equal("Successfully assigned default/web to worker-0"))
	g.Expect(ev.Type).To(Equal(corev1.EventTypeNormal))
	g.Expect(ev.ReportingController).To(Equal("default-scheduler"))
	g.Expect(ev.Action).To(Equal("Binding"))
	g.Expect(ev.Regarding.Kind).To(Equal("Pod"))
	g.Expect(ev.Regarding.Name).To(Equal("web"))
	out := e.kubectl(true, "", "events", "--for", "pod/web")
	g.Expect(out).To(ContainSubstring("Successfully assigned default/web to worker-0"))
	// The TTL: the event goes.
	g.Eventually(func(g Gomega) {
		g.Expect(scheduledEvents(g, e)).To(BeEmpty())
	}, 20*time.Second, 100*time.Millisecond).Should(Succeed())
}

// TestScheduledEventsOffByDefault: without the option a binding records no event.
func TestScheduledEventsOffByDefault(t *testing.T) {
	g := NewWithT(t)
	e := newWorkerEnv(t)
	runPod(g, e, "web")
	g.Expect(scheduledEvents(g, e)).To(BeEmpty())
}
