package store

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
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

func TestGracePeriodRules(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)

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
