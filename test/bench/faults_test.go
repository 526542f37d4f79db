package bench

import (
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
)

// TestFaultProfile: the example profile loads, reaches an even share of the clusters, and lands in
// the GoofyCluster's spec.simulation and the machine templates' spec.template.spec.simulation.
func TestFaultProfile(t *testing.T) {
	g := NewWithT(t)
	p, err := LoadFaultProfile(filepath.Join("faults", "api-errors.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	var picked []int
	for i := range 20 {
		if p.appliesTo(i) {
			picked = append(picked, i)
		}
	}
	g.Expect(picked).To(Equal([]int{4, 9, 14, 19}))

	p.Machine = &infrav1.MachineSimulation{NodeNotReady: true}
	manifests, err := renderClusters(goofyTemplate, Config{Clusters: 1, ControlPlane: 1, Workers: 1, Jitter: "0", KubernetesVersion: "v1.36.3"})
	g.Expect(err).NotTo(HaveOccurred())
	out, err := p.inject(manifests[0])
	g.Expect(err).NotTo(HaveOccurred())
	docs := strings.Split(string(out), "\n---\n")
	g.Expect(docs).To(HaveLen(len(strings.Split(string(manifests[0]), "\n---\n"))))
	var clusters, templates int
	for _, d := range docs {
		var meta struct{ Kind string }
		g.Expect(yaml.Unmarshal([]byte(d), &meta)).To(Succeed())
		switch meta.Kind {
		case "GoofyCluster":
			gc := &infrav1.GoofyCluster{}
			g.Expect(yaml.UnmarshalStrict([]byte(d), gc)).To(Succeed())
			g.Expect(gc.Spec.Simulation.APIServer.Errors).To(HaveLen(1))
			g.Expect(gc.Spec.Backend.InMemory).NotTo(BeNil(), "the rest of the spec is kept")
			clusters++
		case "GoofyMachineTemplate":
			gmt := &infrav1.GoofyMachineTemplate{}
			g.Expect(yaml.UnmarshalStrict([]byte(d), gmt)).To(Succeed())
			g.Expect(gmt.Spec.Template.Spec.Simulation.NodeNotReady).To(BeTrue())
			templates++
		}
	}
	g.Expect(clusters).To(Equal(1))
	g.Expect(templates).To(BeNumerically(">=", 1))

	_, err = LoadFaultProfile(filepath.Join(t.TempDir(), "missing.yaml"))
	g.Expect(err).To(HaveOccurred())
}
