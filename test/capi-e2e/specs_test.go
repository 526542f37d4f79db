package capie2e

import (
	. "github.com/onsi/ginkgo/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/test/e2e"
)

// Each Describe is named after the spec it runs (E2E_FOCUS selects by it); the inputs are the
// spec's own, with Goofy's flavors. Specs that fail because of a known gap in Goofy's simulation
// carry the goofy-gap label (`make e2e-upstream` skips them unless E2E_LABELS is set otherwise);
// specs that cannot run against Goofy at all are not here. docs/e2e.md gives the reason of each.

// goofyGap labels the specs that fail on a fidelity gap of Goofy's that docs/e2e.md describes.
const goofyGap = "goofy-gap"

var _ = Describe("MachineDeploymentScaleSpec", func() {
	e2e.MachineDeploymentScaleSpec(ctx, func() e2e.MachineDeploymentScaleSpecInput {
		return e2e.MachineDeploymentScaleSpecInput{
			E2EConfig:             e2eConfig,
			ClusterctlConfigPath:  clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy,
			ArtifactFolder:        artifactFolder,
			SkipCleanup:           skipCleanup,
		}
	})
})

var _ = Describe("MachineDeploymentRemediationSpec", func() {
	// The md-remediation flavor is Goofy's default template, which has a MachineHealthCheck on
	// the workers' Ready condition; the spec makes a Node unhealthy by patching its condition in
	// the workload cluster.
	e2e.MachineDeploymentRemediationSpec(ctx, func() e2e.MachineDeploymentRemediationSpecInput {
		return e2e.MachineDeploymentRemediationSpecInput{
			E2EConfig:             e2eConfig,
			ClusterctlConfigPath:  clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy,
			ArtifactFolder:        artifactFolder,
			SkipCleanup:           skipCleanup,
		}
	})
})

var _ = Describe("KCPAdoptionSpec", func() {
	e2e.KCPAdoptionSpec(ctx, func() e2e.KCPAdoptionSpecInput {
		return e2e.KCPAdoptionSpecInput{
			E2EConfig:             e2eConfig,
			ClusterctlConfigPath:  clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy,
			ArtifactFolder:        artifactFolder,
			SkipCleanup:           skipCleanup,
		}
	})
})

var _ = Describe("ClusterClassChangesSpec", func() {
	e2e.ClusterClassChangesSpec(ctx, func() e2e.ClusterClassChangesSpecInput {
		return e2e.ClusterClassChangesSpecInput{
			E2EConfig:             e2eConfig,
			ClusterctlConfigPath:  clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy,
			ArtifactFolder:        artifactFolder,
			SkipCleanup:           skipCleanup,
			Flavor:                "topology",
			// Fields set on the ClusterClass's templates after the Cluster exists; the spec checks
			// that they are rolled out (as CAPI's own run with its in-memory backend does).
			ModifyControlPlaneFields: map[string]any{
				"spec.kubeadmConfigSpec.verbosity": int64(4),
			},
			ModifyMachineDeploymentBootstrapConfigTemplateFields: map[string]any{
				"spec.template.spec.verbosity": int64(4),
			},
			// A field the goofy ClusterClass's own patches leave alone (they set the phase
			// durations from variables, which would override a change of those).
			ModifyMachineDeploymentInfrastructureMachineTemplateFields: map[string]any{
				"spec.template.spec.capacity.memory": "16Gi",
			},
		}
	})
})

var _ = Describe("ClusterClassRolloutSpec", func() {
	e2e.ClusterClassRolloutSpec(ctx, func() e2e.ClusterClassRolloutSpecInput {
		return e2e.ClusterClassRolloutSpecInput{
			E2EConfig:             e2eConfig,
			ClusterctlConfigPath:  clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy,
			ArtifactFolder:        artifactFolder,
			SkipCleanup:           skipCleanup,
			Flavor:                "topology-taints",
		}
	})
})

// KCPAndMachineDeploymentRolloutSpec is v1.14's rollout spec for KCP and MachineDeployments
// (in-place changes, Machine taints propagated to Nodes, then a rollout of both).
var _ = Describe("KCPAndMachineDeploymentRolloutSpec", func() {
	e2e.KCPAndMachineDeploymentRolloutSpec(ctx, func() e2e.KCPAndMachineDeploymentRolloutSpecInput {
		return e2e.KCPAndMachineDeploymentRolloutSpecInput{
			E2EConfig:             e2eConfig,
			ClusterctlConfigPath:  clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy,
			ArtifactFolder:        artifactFolder,
			SkipCleanup:           skipCleanup,
			Flavor:                "kcp-md-taints",
		}
	})
})

// ClusterUpgradeConformanceSpec, upgrade only (conformance needs containers, which Goofy does not
// run), with Goofy's default template as the upgrades flavor and with the topology flavor. The
// "default" and "topology" runs upgrade the Kubernetes version (control plane, workers,
// kube-proxy) without new etcd and CoreDNS image tags; the "image-tags" run also sets those and
// waits for the workload cluster's etcd pods and CoreDNS Deployment to roll out (Goofy reports
// rollouts and takes static pod images from kubeadm-config since the gaps docs/e2e.md records).
// (With the topology flavor the spec sets the tags only through ClusterClass variables named
// etcdImageTag and coreDNSImageTag, which the goofy ClusterClass does not have.)
func clusterUpgrade(flavor string, imageTags bool) func() e2e.ClusterUpgradeConformanceSpecInput {
	return func() e2e.ClusterUpgradeConformanceSpecInput {
		cfg := e2eConfig
		if !imageTags {
			cfg = e2eConfig.DeepCopy()
			delete(cfg.Variables, e2e.EtcdVersionUpgradeTo)
			delete(cfg.Variables, e2e.CoreDNSVersionUpgradeTo)
		}
		return e2e.ClusterUpgradeConformanceSpecInput{
			E2EConfig:             cfg,
			ClusterctlConfigPath:  clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy,
			ArtifactFolder:        artifactFolder,
			SkipCleanup:           skipCleanup,
			SkipConformanceTests:  true,
			Flavor:                ptr.To(flavor),
		}
	}
}

var _ = Describe("ClusterUpgradeConformanceSpec default", func() {
	e2e.ClusterUpgradeConformanceSpec(ctx, clusterUpgrade("upgrades", false))
})

var _ = Describe("ClusterUpgradeConformanceSpec topology", func() {
	e2e.ClusterUpgradeConformanceSpec(ctx, clusterUpgrade("topology", false))
})

var _ = Describe("ClusterUpgradeConformanceSpec image-tags default", func() {
	e2e.ClusterUpgradeConformanceSpec(ctx, clusterUpgrade("upgrades", true))
})

var _ = Describe("ScaleSpec", func() {
	// Sized for 2 shared cores: 5 clusters (1 control plane + 1 MachineDeployment of 1 worker
	// each), 3 at a time, one extra ClusterClass; CAPI_SCALE_* variables override it.
	e2e.ScaleSpec(ctx, func() e2e.ScaleSpecInput {
		return e2e.ScaleSpecInput{
			E2EConfig:                         e2eConfig,
			ClusterctlConfigPath:              clusterctlConfigPath,
			BootstrapClusterProxy:             bootstrapClusterProxy,
			ArtifactFolder:                    artifactFolder,
			SkipCleanup:                       skipCleanup,
			Flavor:                            ptr.To("topology"),
			ClusterClassName:                  "goofy",
			ClusterCount:                      ptr.To[int64](5),
			Concurrency:                       ptr.To[int64](3),
			ControlPlaneMachineCount:          ptr.To[int64](1),
			MachineDeploymentCount:            ptr.To[int64](1),
			WorkerPerMachineDeploymentCount:   ptr.To[int64](1),
			AdditionalClusterClassCount:       ptr.To[int64](1),
			DeployClusterInSeparateNamespaces: ptr.To(false),
			UseCrossNamespaceClusterClass:     ptr.To(false),
			DumpResources:                     true,
		}
	})
})
