package simulate

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestAddPodRequestsAddsWhatPodRequestsReturns: the scheduler's sum over a node's pods counts
// each pod as podRequests does, overhead and init containers included.
func TestAddPodRequestsAddsWhatPodRequestsReturns(t *testing.T) {
	g := NewWithT(t)
	list := func(cpu, memory string) corev1.ResourceList {
		l := corev1.ResourceList{}
		if cpu != "" {
			l[corev1.ResourceCPU] = resource.MustParse(cpu)
		}
		if memory != "" {
			l[corev1.ResourceMemory] = resource.MustParse(memory)
		}
		return l
	}
	container := func(cpu, memory string) corev1.Container {
		return corev1.Container{Resources: corev1.ResourceRequirements{Requests: list(cpu, memory)}}
	}
	specs := map[string]*corev1.PodSpec{
		"containers":      {Containers: []corev1.Container{container("100m", "64Mi"), container("250m", "")}},
		"overhead":        {Containers: []corev1.Container{container("100m", "64Mi")}, Overhead: list("50m", "8Mi")},
		"no requests":     {Containers: []corev1.Container{{}}},
		"init is largest": {Containers: []corev1.Container{container("100m", "64Mi")}, InitContainers: []corev1.Container{container("2", "16Mi")}, Overhead: list("", "1Mi")},
	}
	for name, spec := range specs {
		got, want := list("1", "1Gi"), list("1", "1Gi")
		addPodRequests(got, spec)
		addResources(want, podRequests(spec))
		g.Expect(got).To(HaveLen(len(want)), name)
		for r, q := range want {
			have := got[r]
			g.Expect(have.Cmp(q)).To(BeZero(), "%s: %s is %s, want %s", name, r, have.String(), q.String())
		}
	}
	got := corev1.ResourceList{}
	addPodRequests(got, specs["overhead"])
	g.Expect(got.Cpu().MilliValue()).To(Equal(int64(150)))
	g.Expect(got.Memory().Value()).To(Equal(int64(72 << 20)))
}
