package simulate_test

import (
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// Instant rollouts (rollouts.go), in a cluster with workloads off.

func podTemplate(image string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image}}}}
}

// A Deployment reports its rollout of the current generation complete, as kube-controller-manager
// would once the pods ran; after an image change, again for the new generation.
func TestDeploymentRolloutIsReported(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}, Template: podTemplate("coredns:v1")}}
	mustCreate(t, c, d)
	g.Eventually(func() int64 { return mustGet(t, c, d).(*appsv1.Deployment).Status.ObservedGeneration }, safetyTimeout).Should(BeEquivalentTo(1))
	got := mustGet(t, c, d).(*appsv1.Deployment)
	g.Expect(got.Status.UpdatedReplicas).To(BeEquivalentTo(2))
	g.Expect(got.Status.AvailableReplicas).To(BeEquivalentTo(2))
	g.Expect(got.Status.Conditions).To(ContainElement(HaveField("Type", appsv1.DeploymentAvailable)))

	got.Spec.Template.Spec.Containers[0].Image = "coredns:v2"
	_, err := c.Update(deploymentsGVR, "kube-system", got, store.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() int64 { return mustGet(t, c, d).(*appsv1.Deployment).Status.ObservedGeneration }, safetyTimeout).
		Should(BeEquivalentTo(2), "the new generation rolled out")
}

// A DaemonSet reports one updated, available pod per Node, following Nodes as they come and go.
func TestDaemonSetRolloutFollowsNodes(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	mustCreate(t, c, readyNode("n1", corev1.ConditionTrue))
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}, Template: podTemplate("kube-proxy:v1")}}
	mustCreate(t, c, ds)
	status := func() appsv1.DaemonSetStatus { return mustGet(t, c, ds).(*appsv1.DaemonSet).Status }
	g.Eventually(func() int32 { return status().NumberAvailable }, safetyTimeout).Should(BeEquivalentTo(1))
	g.Expect(status().ObservedGeneration).To(BeEquivalentTo(1))
	mustCreate(t, c, readyNode("n2", corev1.ConditionTrue))
	g.Eventually(func() int32 { return status().UpdatedNumberScheduled }, safetyTimeout).Should(BeEquivalentTo(2))
	_, err := c.Delete(nodesGVR, "", "n1", store.DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() int32 { return status().DesiredNumberScheduled }, safetyTimeout).Should(BeEquivalentTo(1))
}
