package capie2e

import (
	. "github.com/onsi/ginkgo/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/test/e2e"
)

// quickStart is QuickStartSpec's input for one of Goofy's flavors ("" is the default template).
func quickStart(flavor string) func() e2e.QuickStartSpecInput {
	return func() e2e.QuickStartSpecInput {
		in := e2e.QuickStartSpecInput{
			E2EConfig:             e2eConfig,
			ClusterctlConfigPath:  clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy,
			ArtifactFolder:        artifactFolder,
			SkipCleanup:           skipCleanup,
			// As CAPI's own QuickStart run: owner references, finalizers and stable resourceVersions.
			PostMachinesProvisioned: checkOwnersFinalizersAndStability(flavor == "topology"),
		}
		if flavor != "" {
			in.Flavor = ptr.To(flavor)
		}
		return in
	}
}

var _ = Describe("QuickStartSpec default", func() {
	e2e.QuickStartSpec(ctx, quickStart(""))
})

var _ = Describe("QuickStartSpec topology", func() {
	e2e.QuickStartSpec(ctx, quickStart("topology"))
})
