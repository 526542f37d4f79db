package e2e

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	. "github.com/onsi/gomega"

	"github.com/goofy-capi/cluster-api-provider-goofy/test/e2e/harness"
)

// The lifecycle scenarios share four clusters: qs (the quick start, 3 + 2: faults, scale,
// remediation), upg (1 + 1 at upgradeFrom: the upgrade), cc (the topology flavor with the
// topology-machinepool flavor's pool: 1 + 1 MachineDeployment worker + a MachinePool of 1,
// ClusterClass, then deleted by TestDelete) and mp (the machinepool flavor, 1 + a MachinePool of 3: machine
// pools, the restart, then deleted by TestDelete). A new cluster waits out at least one 30 s retry of CAPI's cluster
// cache before it is Available (the first connection is tried as soon as the infrastructure is
// provisioned, before any API server runs), so clusters created one after another, each by the
// scenario that needs it, wait it out one after another. When the whole suite runs, the four are
// created together as soon as the plane is up; each scenario still creates its cluster if it is
// missing (ensureCluster), so a scenario run alone (-run) behaves as before.
func suiteClustersCreatedAtOnce() bool {
	if f := flag.Lookup("test.run"); f != nil && f.Value.String() != "" {
		return false
	}
	// The slow fault scenarios create two more clusters in the suite's namespace, whose port range
	// holds only four: they need qs alone, as before.
	return os.Getenv("GOOFY_E2E_FAULTS_SLOW") != "1"
}

// createSuiteClusters applies the four shared clusters without waiting for them.
func createSuiteClusters(ctx context.Context, progress io.Writer) error {
	var failure error
	g := NewGomega(func(message string, _ ...int) {
		if failure == nil {
			failure = fmt.Errorf("%s", message)
		}
	})
	fmt.Fprintln(progress, "e2e: creating the shared clusters qs, upg, cc and mp at once")
	for name, vars := range map[string]map[string]string{
		"qs":  qsVars(),
		"upg": {"KUBERNETES_VERSION": upgradeFrom, "CONTROL_PLANE_MACHINE_COUNT": "1", "WORKER_MACHINE_COUNT": "1"},
	} {
		vars["CLUSTER_NAME"] = name
		createCluster(ctx, g, vars, "cluster-template.yaml")
		if failure != nil {
			return failure
		}
	}
	repo, err := buildClusterctlRepository(ctx, progress)
	if err != nil {
		return err
	}
	cc, err := ccManifests(ctx, repo, ns, "cc", "1", "1")
	if err != nil {
		return err
	}
	if _, err := plane.Apply(ctx, cc); err != nil {
		return err
	}
	manifests, err := repo.Clusterctl(ctx, bins.Clusterctl(), nil, clusterctlGenerateArgs(ns, mpCluster, "machinepool", "1", "3")...)
	if err != nil {
		return err
	}
	_, err = plane.Apply(ctx, []byte(manifests))
	return err
}

// buildClusterctlRepository builds the local repositories once per suite run.
func buildClusterctlRepository(ctx context.Context, progress io.Writer) (*harness.ClusterctlRepository, error) {
	repoOnce.Do(func() {
		ccRepo, ccErr = harness.BuildClusterctlRepository(ctx, repoRoot, bins.CAPIModule, filepath.Join(runDir, "clusterctl"), progress)
	})
	return ccRepo, ccErr
}
