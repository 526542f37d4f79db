package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/workload"
)

// TestMachineTemplateStatus: CAPI's contract for autoscaling from zero, through a running
// manager. A GoofyMachineTemplate's status.capacity is its spec.template.spec.capacity over the
// simulated Node's defaults and status.nodeInfo the simulated Node's architecture and operating
// system; both follow spec changes, and a machine cloned from the template (as CAPI clones it)
// gets a Node with exactly that capacity, architecture and operating system.
func TestMachineTemplateStatus(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	h := newHarness(t)
	startManager(t, h, ns, managerOptions{})

	awaitStatus := func(tmpl *infrav1.GoofyMachineTemplate, want corev1.ResourceList) {
		t.Helper()
		g.Eventually(func() infrav1.GoofyMachineTemplateStatus {
			get(t, tmpl)
			return tmpl.Status
		}, wakeTimeout, 50*time.Millisecond).Should(And(
			HaveField("Capacity", equalResources(want)),
			HaveField("NodeInfo", Equal(infrav1.NodeInfo{Architecture: infrav1.ArchitectureAmd64, OperatingSystem: "linux"})),
		))
	}
	with := func(extra corev1.ResourceList) corev1.ResourceList {
		l := workload.DefaultCapacity()
		for k, v := range extra {
			l[k] = v
		}
		return l
	}

	plain := &infrav1.GoofyMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"}}
	g.Expect(k8sClient.Create(ctx, plain)).To(Succeed())
	awaitStatus(plain, workload.DefaultCapacity())

	gpu := corev1.ResourceName("nvidia.com/gpu")
	big := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi"), gpu: resource.MustParse("1")}
	tmpl := &infrav1.GoofyMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "big"},
		Spec:       infrav1.GoofyMachineTemplateSpec{Template: infrav1.GoofyMachineTemplateResource{Spec: infrav1.GoofyMachineSpec{Capacity: big}}},
	}
	g.Expect(k8sClient.Create(ctx, tmpl)).To(Succeed())
	awaitStatus(tmpl, with(big))

	get(t, tmpl)
	tmpl.Spec.Template.Spec.Capacity[corev1.ResourcePods] = resource.MustParse("250")
	g.Expect(k8sClient.Update(ctx, tmpl)).To(Succeed())
	big[corev1.ResourcePods] = resource.MustParse("250")
	awaitStatus(tmpl, with(big))

	// A machine cloned from the template, as CAPI's MachineSet controller clones it.
	f := provisionedCluster(t, ns, true)
	_, gm := newMachine(t, f, f.cluster.Name+"-md-0", machineOpts{capacity: tmpl.Spec.Template.Spec.Capacity,
		annotations: map[string]string{clusterv1.TemplateClonedFromNameAnnotation: tmpl.Name}})
	awaitCondition(t, gm, infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason)
	node := &corev1.Node{}
	node.Name = gm.Name
	g.Expect(storeGet(h, f, node)).To(Succeed())
	get(t, tmpl)
	g.Expect(node.Status.Capacity).To(equalResources(tmpl.Status.Capacity))
	g.Expect(node.Status.Allocatable).To(equalResources(tmpl.Status.Capacity))
	g.Expect(node.Labels).To(HaveKeyWithValue(corev1.LabelArchStable, string(tmpl.Status.NodeInfo.Architecture)))
	g.Expect(node.Labels).To(HaveKeyWithValue(corev1.LabelOSStable, tmpl.Status.NodeInfo.OperatingSystem))
	g.Expect(node.Status.NodeInfo.Architecture).To(Equal(string(tmpl.Status.NodeInfo.Architecture)))
	g.Expect(node.Status.NodeInfo.OperatingSystem).To(Equal(tmpl.Status.NodeInfo.OperatingSystem))
}

// equalResources matches a ResourceList with the same quantities, whatever their representation.
func equalResources(want corev1.ResourceList) OmegaMatcher {
	return WithTransform(quantities, Equal(quantities(want)))
}

// quantities is a ResourceList in canonical form.
func quantities(l corev1.ResourceList) map[corev1.ResourceName]string {
	out := make(map[corev1.ResourceName]string, len(l))
	for k, v := range l {
		out[k] = v.String()
	}
	return out
}
